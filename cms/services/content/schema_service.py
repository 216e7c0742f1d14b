"""Schema as code (decisions.md, Schema as code): the snapshot of an instance's collections, the diff of a
snapshot against it, and its apply, all or nothing, one at a time across replicas.

- `export` answers the snapshot (`schema_snapshot`); `diff` the changes a snapshot makes (`schema_plan`,
  `schema_diff`); `apply` makes them, under the schema lock (`SharedLock`, shared by every replica:
  a second apply meanwhile is refused with 409 `conflict`, or waits for it at start-up), after checking
  the whole snapshot, the hash it was diffed against (409), the data it would lose (422 unless
  `allow_data_loss`) and the stored values it converts (422, as a collection update refuses them);
  then the journaled writes of `schema_run`.
- An apply cut short leaves its journal behind; the next process that takes the lock undoes it or
  completes it (`resume`): `cms serve` at start-up, and any export, diff or apply first. While another
  process holds the lock over a journal (an apply running), export and diff answer 409 too.

`principal` None is the operator at the command line (`cms schema ...`, SCHEMA_FILE at start-up); any
other caller must be an admin.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from typing import Any

from cms.errors import Conflict, ValidationFailed
from cms.models import Principal
from cms.services.access import require_admin_or_operator
from cms.services.content.schema_checks import check_field_changes
from cms.services.content.schema_diff import data_loss, loses_data
from cms.services.content.schema_plan import Plan, WantedCollection, make_plan
from cms.services.content.schema_run import (
    COMMITTED,
    Progress,
    RunDeps,
    finish,
    forward,
    journal_of,
    no_progress,
    undo,
)
from cms.services.content.schema_snapshot import snapshot
from cms.services.operations.shared_lock import SharedLock

log = logging.getLogger("cms.schema")

APPLY = "schema apply"
"""What the schema lock's holder is doing, as a refused caller is told."""
SCHEMA_LOCK_TTL_S = 10.0
"""Seconds the schema lock outlives its holder's last renewal (renewed every third of it): an apply
killed with SIGKILL is resumed by another process at most this long after."""
START_WAIT_S = 600.0
"""Seconds `cms serve` waits at start-up for another replica's apply of SCHEMA_FILE (or any apply)."""


class SchemaService:
    """Export, diff and apply of snapshots (module docstring) over `deps` (the stores, the collection
    service, the catalog, the transactions, the bus), one at a time under `lock`."""

    def __init__(self, deps: RunDeps, lock: SharedLock) -> None:
        self._deps = deps
        self._lock = lock

    async def export(self, principal: Principal | None, *, wait_s: float = 0.0) -> dict[str, Any]:
        """The instance's snapshot: `{"collections": [...], "format": 1, "hash"}`. Raises Forbidden, or
        Conflict while an apply runs (after waiting up to `wait_s` for it)."""
        require_admin_or_operator(principal)
        await self.resume(wait_s=wait_s)
        return snapshot(await self._deps.catalog.all())

    async def diff(self, principal: Principal | None, wanted: Sequence[WantedCollection], *,
                   wait_s: float = 0.0) -> dict[str, Any]:
        """`{"hash": <the instance's hash>, "changes": [...]}` for a snapshot holding `wanted`. Raises
        Forbidden, ValidationFailed (the snapshot cannot be applied: every problem listed), or Conflict
        while an apply runs (after waiting up to `wait_s` for it)."""
        require_admin_or_operator(principal)
        await self.resume(wait_s=wait_s)
        plan = await make_plan(self._deps.service, await self._deps.catalog.all(), wanted)
        return {"hash": plan.current_hash, "changes": plan.changes}

    async def apply(self, principal: Principal | None, wanted: Sequence[WantedCollection], *,
                    expected_hash: str | None, allow_data_loss: bool = False, wait_s: float = 0.0,
                    progress: Progress = no_progress) -> dict[str, Any]:
        """Make the instance hold `wanted` and answer its new snapshot (`export`'s shape).

        `expected_hash`: the hash the caller's diff was made against (None: whatever the schema is, for
        the command line and start-up, which diff under the lock). `wait_s`: how long to wait for another
        apply (0: refuse at once). Raises Forbidden; Conflict (409) when the hash is not the current one
        or another apply runs; ValidationFailed (422) when the snapshot is not valid, loses data without
        `allow_data_loss` (each such change listed), or stored values block a change (as a collection
        update would refuse them), or a new unique index finds duplicates (then nothing has changed).
        Other failures leave the schema as it was, or, past the point of no return, to be completed by
        the next process that takes the lock."""
        require_admin_or_operator(principal)
        user_id = principal.user_id if principal is not None else None

        async def work() -> dict[str, Any]:
            await self._resume_held()
            current = await self._deps.catalog.all()
            plan = await make_plan(self._deps.service, current, wanted)
            if expected_hash is not None and expected_hash != plan.current_hash:
                raise Conflict("The schema changed since the diff was made (its hash differs); diff again")
            if not plan.changes:
                return snapshot(current)
            await self._check(plan, allow_data_loss)
            return await self._run(plan, allow_data_loss, user_id, progress)

        return await self._lock.run(APPLY, work, wait_s=wait_s)

    async def resume(self, *, wait_s: float = START_WAIT_S) -> bool:
        """Undo or complete an apply cut short (start-up), waiting up to `wait_s` for the lock when there is
        a journal (an apply running elsewhere, or one cut short whose lock has not expired yet). Returns
        whether there was one to resume. Raises Conflict when the wait runs out."""
        if await self._deps.journal.get() is None:
            return False

        async def work() -> bool:
            return await self._resume_held()

        return await self._lock.run(APPLY, work, wait_s=wait_s)

    async def _resume_held(self) -> bool:
        """Holding the lock: undo (APPLYING) or complete (COMMITTED) the journal left, if any."""
        journal = await self._deps.journal.get()
        if journal is None:
            return False
        if journal.state == COMMITTED:
            log.warning("completing schema apply %s, cut short past its point of no return", journal.token)
            await finish(self._deps, journal)
        else:
            log.warning("undoing schema apply %s, cut short before its point of no return", journal.token)
            await undo(self._deps, journal)
        return True

    async def _check(self, plan: Plan, allow_data_loss: bool) -> None:
        """Refuse (ValidationFailed) data loss not allowed, and stored values a change refuses."""
        lossy = data_loss(plan.changes)
        if lossy and not allow_data_loss:
            raise ValidationFailed(
                f"The snapshot loses data ({len(lossy)} changes); apply it with allow_data_loss to accept that",
                errors={_where(change): [_loss(change)] for change in lossy})
        errors: dict[str, list[str]] = {}
        for collection in plan.collections:
            changes = collection.field_changes()
            if not changes:
                continue
            clearing = frozenset(c.name for c in changes if loses_data(c)) if allow_data_loss else frozenset()
            check = await check_field_changes(self._deps.records, collection.collection_id, changes,
                                              clearing=clearing, stored_names=dict(collection.renames))
            if check.problems():
                errors[f"collections.{collection.name}.schema"] = check.problems()
        if errors:
            raise ValidationFailed("Existing records hold values the new schema refuses", errors=errors)

    async def _run(self, plan: Plan, allow_data_loss: bool, user_id: str | None,
                   progress: Progress) -> dict[str, Any]:
        journal = journal_of(secrets.token_hex(8), self._deps.clock(), plan.collections, clearing=allow_data_loss,
                             changes=plan.changes, user_id=user_id)
        await self._deps.journal.begin(journal)
        log.info("schema apply %s: %d changes to %d collections", journal.token, len(plan.changes),
                 len(plan.collections))
        await forward(self._deps, journal, progress)
        return await finish(self._deps, journal, progress)

    async def wait_idle(self) -> None:
        """Wait for an apply of this process whose caller went away (at shutdown)."""
        await self._lock.wait_idle()


def _where(change: dict[str, Any]) -> str:
    """The `errors` key of a change: `collections.<name>` or `collections.<name>.<field>`."""
    field = f".{change['field']}" if change["field"] else ""
    return f"collections.{change['collection']}{field}"


def _loss(change: dict[str, Any]) -> str:
    """What a data-losing change loses, in words."""
    if change["field"] is None:
        return "The collection is deleted with its records."
    if change["op"] == "delete":
        return "The field is deleted: its stored values are removed."
    return (f"The field's type changes ({change['from'].get('type')} -> {change['to'].get('type')}): stored values "
            "are converted, and those that do not convert are cleared.")
