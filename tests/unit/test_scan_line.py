"""The scan line's fair share (issue 37, item 4), on the line itself: the order in which waiting
clients are served, the per-client bound, the predicted wait, and that a caller who gives up or is
cancelled leaves nothing behind. The API tests (tests/api/test_scan_line.py) show it end to end."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cms.errors import ServiceUnavailable
from cms.store.scan_line import ScanLine


class Steps:
    """A monotonic clock that moves only when told (the mean scan time becomes exact)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    """Let every ready coroutine run until it blocks again."""
    for _ in range(5):
        await asyncio.sleep(0)


def scan(line: ScanLine, client: str | None, served: list[str], name: str,
         release: asyncio.Event) -> Callable[[], asyncio.Task[None]]:
    async def run() -> None:
        async with line.slot(client):
            served.append(name)
            await release.wait()

    return lambda: asyncio.create_task(run())


async def test_a_freed_slot_goes_to_the_clients_in_turn_not_to_the_oldest_waiter() -> None:
    line, release = ScanLine(1, max_per_client=8), asyncio.Event()
    served: list[str] = []
    tasks = [scan(line, "a", served, f"a{n}", release)() for n in range(4)]
    await settle()
    tasks.append(scan(line, "b", served, "b0", release)())
    tasks.append(scan(line, "c", served, "c0", release)())
    await settle()
    assert served == ["a0"] and line.waiting == 5 and line.clients == 3
    release.set()
    await asyncio.gather(*tasks)
    assert served == ["a0", "a1", "b0", "c0", "a2", "a3"]
    assert line.waiting == 0 and line.clients == 0  # nobody in line: nobody tracked


async def test_a_client_is_refused_past_its_share_while_another_still_gets_in() -> None:
    line, release = ScanLine(1, max_per_client=3), asyncio.Event()
    served: list[str] = []
    tasks = [scan(line, "a", served, f"a{n}", release)() for n in range(3)]
    await settle()
    with pytest.raises(ServiceUnavailable) as refused:
        async with line.slot("a"):
            pass
    assert int(refused.value.headers["Retry-After"]) >= 1
    tasks.append(scan(line, "b", served, "b0", release)())
    await settle()
    assert line.waiting == 3
    release.set()
    await asyncio.gather(*tasks)
    assert served == ["a0", "a1", "b0", "a2"]


async def test_the_scans_of_no_client_are_not_bounded_by_a_share() -> None:
    line, release = ScanLine(1, max_per_client=1), asyncio.Event()
    served: list[str] = []
    tasks = [scan(line, None, served, f"n{n}", release)() for n in range(3)]
    await settle()
    assert line.waiting == 2
    release.set()
    await asyncio.gather(*tasks)
    assert served == ["n0", "n1", "n2"]


async def test_the_predicted_wait_counts_the_turns_before_the_caller() -> None:
    clock = Steps()
    line, release = ScanLine(2, max_per_client=8, max_wait_s=100, clock=clock), asyncio.Event()
    served: list[str] = []
    async with line.slot("a"):
        clock.now = 1.0  # one scan of 1 s: the mean
    tasks = [scan(line, "a", served, f"a{n}", release)() for n in range(6)]  # 2 running, 4 waiting
    await settle()
    assert line.predicted_wait_s("a") == (4 + 1) * 1.0 / 2  # behind its own four
    assert line.predicted_wait_s("b") == (1 + 1) * 1.0 / 2  # one of a's gets a turn first
    tasks += [scan(line, "b", served, f"b{n}", release)() for n in range(2)]
    await settle()
    assert line.predicted_wait_s("b") == (2 + 3 + 1) * 1.0 / 2  # its two, and three of a's take turns first
    assert line.predicted_wait_s("c") == (1 + 1 + 1) * 1.0 / 2  # one of a's, one of b's
    assert line.predicted_wait_s("a") == (4 + 2 + 1) * 1.0 / 2  # a's turn comes before b's: b's two
    release.set()
    await asyncio.gather(*tasks)
    assert line.predicted_wait_s("a") == 0


async def test_a_predicted_wait_past_the_bound_is_refused_at_once() -> None:
    clock = Steps()
    line, release = ScanLine(1, max_per_client=8, max_wait_s=2.5, clock=clock), asyncio.Event()
    served: list[str] = []
    async with line.slot("a"):
        clock.now = 1.0
    tasks = [scan(line, "a", served, f"a{n}", release)() for n in range(3)]  # 1 running, 2 waiting
    await settle()
    with pytest.raises(ServiceUnavailable) as refused:  # a: (2 + 1) s ahead
        async with line.slot("a"):
            pass
    assert refused.value.headers["Retry-After"] == "3"
    tasks.append(scan(line, "b", served, "b0", release)())  # b: (1 + 1) s ahead, let in
    await settle()
    assert line.waiting == 3
    release.set()
    await asyncio.gather(*tasks)
    assert served == ["a0", "a1", "b0", "a2"]


async def test_a_caller_that_gives_up_or_is_cancelled_leaves_the_line() -> None:
    line, release = ScanLine(1, max_per_client=8, max_wait_s=0.05), asyncio.Event()
    served: list[str] = []
    running = scan(line, "a", served, "a0", release)()
    await settle()
    with pytest.raises(ServiceUnavailable):  # no slot within max_wait_s
        async with line.slot("b"):
            pass
    assert line.waiting == 0 and line.clients == 1
    line.max_wait_s = 10
    cancelled = scan(line, "c", served, "c0", release)()
    await settle()
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    assert line.waiting == 0 and line.clients == 1
    later = scan(line, "d", served, "d0", release)()
    await settle()
    release.set()
    await asyncio.gather(running, later)
    assert served == ["a0", "d0"] and line.clients == 0


async def test_a_waiter_cancelled_as_the_slot_frees_is_skipped() -> None:
    line, release = ScanLine(1, max_per_client=8), asyncio.Event()
    served: list[str] = []
    running = scan(line, "a", served, "a0", release)()
    await settle()
    first, second = scan(line, "b", served, "b0", release)(), scan(line, "c", served, "c0", release)()
    await settle()
    release.set()  # the slot frees when a0 runs again ...
    first.cancel()  # ... and b0's turn is cancelled before that, its coroutine woken only after it
    await asyncio.gather(running, second, first, return_exceptions=True)
    assert served == ["a0", "c0"] and line.waiting == 0 and line.clients == 0
    assert line.predicted_wait_s("d") == 0  # the slot is free again


async def test_a_waiter_cancelled_just_after_it_was_handed_the_slot_passes_it_on() -> None:
    line, release = ScanLine(1, max_per_client=8), asyncio.Event()
    served: list[str] = []
    waiters: list[asyncio.Task[None]] = []

    async def first_then_cancel_the_next() -> None:
        async with line.slot("a"):
            served.append("a0")
            await release.wait()
        waiters[0].cancel()  # the slot was just handed to b0, which has not run yet

    running = asyncio.create_task(first_then_cancel_the_next())
    await settle()
    waiters += [scan(line, "b", served, "b0", release)(), scan(line, "c", served, "c0", release)()]
    await settle()
    release.set()
    await asyncio.gather(running, *waiters, return_exceptions=True)
    assert waiters[0].cancelled()
    assert served == ["a0", "c0"] and line.waiting == 0 and line.clients == 0
    assert line.predicted_wait_s("d") == 0


async def test_hold_takes_the_free_slots_until_it_ends() -> None:
    line, release = ScanLine(2, max_per_client=8), asyncio.Event()
    served: list[str] = []
    release.set()
    async with line.hold():
        waiting = scan(line, "a", served, "a0", release)()
        await settle()
        assert served == [] and line.waiting == 1
    await waiting
    assert served == ["a0"] and line.clients == 0
