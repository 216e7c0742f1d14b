"""The checks of bulk changes (spec: Records, bulk update and delete; decisions.md: Limits): the id list,
and the all-or-nothing refusals that name each record a bulk change would fail for."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from cms.errors import Forbidden, ValidationFailed
from cms.models import Record
from cms.services.access import Access, record_document

MAX_BULK_IDS = 1_000


def check_record_ids(record_ids: Sequence[str], max_ids: int = MAX_BULK_IDS) -> list[str]:
    """The ids of a bulk request: 1..`max_ids` (the `bulk_max_ids` setting), each listed once.
    Raises ValidationFailed (422, `errors: {"record_ids": [...]}`) for an empty list, too many ids
    or a repeated id."""
    ids = list(record_ids)
    if not ids:
        raise _ids_error("At least one id is required.")
    if len(ids) > max_ids:
        raise _ids_error(f"At most {max_ids:,} ids per request; {len(ids):,} given.")
    repeated = [i for i, n in Counter(ids).items() if n > 1]
    if repeated:
        shown = ", ".join(repeated[:20]) + (", ..." if len(repeated) > 20 else "")
        raise _ids_error(f"Each id may be listed once; repeated: {shown}.")
    return ids


def refused_ids(refused: Sequence[str], verb: str) -> Forbidden:
    """Bulk changes are all or nothing: 403 with `errors: {<id>: [reason]}` for the records the
    caller may view but not change."""
    return Forbidden(
        f"You may not {verb} {len(refused)} of these records; nothing was changed",
        errors={record_id: [f"You may not {verb} this record."] for record_id in refused},
    )


def _ids_error(message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid record_ids: {message}", errors={"record_ids": [message]})


def bulk_refused(action: str, failures: dict[str, list[str]], total: int) -> ValidationFailed:
    """422 for a bulk request that would fail for some records: `errors` maps each record id to why."""
    return ValidationFailed(
        f"{len(failures)} of {total} records cannot be {action}; nothing was changed", errors=failures
    )


def permit_all(view: Access, change: Access, record_ids: Sequence[str], found: dict[str, Record],
               verb: str) -> dict[str, Record]:
    """`found` (the records of `record_ids` that exist, by id: stored or working copies), once the view
    rule `view` shows and the rule `change` permits every one of them, its field write rules included.
    When either rule depends on the record, a missing id counts as refused like a hidden one, so the
    answer never tells them apart. Raises Forbidden naming every refused id (`refused_ids`) or
    `change.field_refusal` of a ruled field."""
    if view.everything and change.everything and not change.writes_ruled_fields:
        return found
    refused = [i for i in record_ids if i not in found or not view.allows(found[i]) or not change.allows(found[i])]
    if refused:
        raise refused_ids(refused, verb)
    for record in found.values():
        name = change.refused_field(record_document(record))
        if name is not None:
            raise change.field_refusal(name)
    return found
