"""The embedded database process (`python -m cms.embedded_db ARGS`): SecantusDB's own command line,
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

The work-around resets the sweeper thread's cursors after each sweep (`reset()` releases the page
and keeps the cursor for reuse). It is applied only where SecantusDB still has the methods it wraps;
otherwise SecantusDB runs unchanged and a warning is logged. Remove this module once SecantusDB
releases a fix.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger("cms.embedded_db")


def release_cursors_after(sweep: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a `Storage` method so that, however it ends, it resets the calling thread's cached
    WiredTiger cursors (`Storage._tls.cursors`), releasing the pages they held."""

    @functools.wraps(sweep)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return sweep(self, *args, **kwargs)
        finally:
            for cursor in list(getattr(self._tls, "cursors", {}).values()):
                try:
                    cursor.reset()
                except Exception:  # a cursor of a dropped table: nothing is held
                    log.debug("could not reset a cursor after the TTL sweep", exc_info=True)

    wrapped.__cms_releases_cursors__ = True  # type: ignore[attr-defined]
    return wrapped


def apply_workarounds() -> bool:
    """Make SecantusDB's TTL sweeper release its cursors after each sweep (see the module
    docstring). Returns whether it was applied (False: SecantusDB has changed; nothing is done).
    Idempotent."""
    from secantus import storage  # type: ignore[import-untyped]  # the `embedded` extra; this process only

    store = getattr(storage, "Storage", None)
    sweep = getattr(store, "prune_ttl_all_collections", None)
    if store is None or sweep is None or not hasattr(store, "_cursor"):
        log.warning("SecantusDB's TTL sweeper work-around not applied: this SecantusDB has no "
                    "Storage.prune_ttl_all_collections")
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
