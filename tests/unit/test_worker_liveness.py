"""The worker's reconnect back-off (workers/liveness.py); the faults themselves: tests/faults/."""

import pytest

from workers.liveness import LOCK_REFRESH_EVERY_S, LOCK_TTL_S, reconnect_delay_s


@pytest.mark.parametrize("failures, delay_s", [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (6, 10.0), (40, 10.0)],
                         ids=["first", "second", "third", "fifth", "capped", "long-outage"])
def test_reconnect_delay_doubles_up_to_10_s(failures: int, delay_s: float) -> None:
    assert reconnect_delay_s(failures) == delay_s


def test_a_killed_workers_locks_lapse_within_the_30_s_of_decisions_md() -> None:
    assert LOCK_REFRESH_EVERY_S * 3 <= LOCK_TTL_S <= 30 - 5  # refreshed thrice per life; 5 s for the next poll
