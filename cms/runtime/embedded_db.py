"""The embedded database process (`python -m cms.runtime.embedded_db ARGS`): SecantusDB's own command line,
`python -m secantus ARGS`, with a work-around for one of its defects applied first. Started by
`embedded.start_mongodb`; nothing else imports SecantusDB.

The defect (SecantusDB 0.7.0b3, the newest release): SecantusDB keeps the documents of every
collection in 16 shared WiredTiger tables (`secantus_documents_sh0..15`, chosen by a hash of the
collection's name), and each thread keeps its cursors open between operations. Its TTL sweeper
thread walks every collection with a TTL index once a minute (`prune_ttl_all_collections`), and a
walk ends with the cursor on the first document after that collection in its table, then sleeps
with the cursor still there. When the next collection in the table is a records collection
(`records_<id>` sorts after `audit_log`, `mfa_challenges`, `one_time_tokens` and `otp_codes`, all
TTL-indexed), that cursor holds a page that inserts into it need WiredTiger to split, and every
insert into it waits: creates fell from about 1,500 to about 150 a second on the benchmark rig,
for as long as the process ran. Which collection is hit depends on its random id: about one in
four.

The work-around makes the sweeper thread call SecantusDB's own `release_thread_snapshot` after each
sweep (a `WT_SESSION.reset()`: it releases the read snapshot and every cursor position and keeps
the cursors for reuse), as SecantusDB's wire servers do after every request. It is applied only
where SecantusDB still has the methods involved; otherwise SecantusDB runs unchanged and a warning
is logged. Remove this module once SecantusDB releases a fix.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("cms.runtime.embedded_db")


def release_cursors_after(sweep: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a `Storage` method so that, however it ends, the calling thread releases its WiredTiger
    read snapshot and cursor positions (`Storage.release_thread_snapshot`, which SecantusDB's wire
    servers call after every request but its TTL sweeper does not)."""

    @functools.wraps(sweep)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return sweep(self, *args, **kwargs)
        finally:
            self.release_thread_snapshot()

    wrapped.__cms_releases_cursors__ = True  # type: ignore[attr-defined]
    return wrapped


def apply_workarounds() -> bool:
    """Make SecantusDB's TTL sweeper release its snapshot and cursors after each sweep (see the
    module docstring). Returns whether it was applied (False, with a warning, when SecantusDB no
    longer has the methods involved; it then runs unchanged). Idempotent."""
    from secantus import storage  # type: ignore[import-untyped]  # the `embedded` extra; this process only

    store = getattr(storage, "Storage", None)
    sweep = getattr(store, "prune_ttl_all_collections", None)
    if store is None or sweep is None or not hasattr(store, "release_thread_snapshot"):
        log.warning("SecantusDB's TTL sweeper work-around not applied: this SecantusDB has no "
                    "Storage.prune_ttl_all_collections or Storage.release_thread_snapshot")
        return False
    if not getattr(sweep, "__cms_releases_cursors__", False):
        store.prune_ttl_all_collections = release_cursors_after(sweep)
    return True


def main(argv: list[str] | None = None) -> int:
    """Apply the work-around, then run SecantusDB's command line with `argv` (default: this
    process's arguments). Returns its exit status."""
    apply_workarounds()
    from secantus.cli import main as secantus_main  # type: ignore[import-untyped]

    return int(secantus_main(sys.argv[1:] if argv is None else argv) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
