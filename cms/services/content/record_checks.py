"""The one check of a single record's rules, for records and files (spec: Records, Files; decisions.md,
Access rules): the record looked up by id once the view rule shows it and the change rule permits it."""

from __future__ import annotations

from collections.abc import Callable

from cms.models import Collection, Principal, Record
from cms.services import access as actions
from cms.services.access import Access, check, record_document
from cms.services.representation import records as represent
from cms.store.records import RecordRepository


async def checked_record(records: RecordRepository, view: Access, change: Access | None,
                         record_id: str) -> Record | None:
    """`permitted_record`, skipped when neither rule depends on the record (both permit every
    record): returns None then, without a look-up. Raises what `permitted_record` raises."""
    if view.everything and (change is None or change.everything and not change.writes_ruled_fields):
        return None
    return await permitted_record(records, view, change, record_id)


async def permitted_record(records: RecordRepository, view: Access, change: Access | None,
                           record_id: str) -> Record:
    """The one check of a single record's rules, for records and files: the record (one `_id`
    look-up), once the view rule `view` shows it and `change` (the update or delete rule, if any)
    permits it. Raises `refusal()` of a rule that refuses outright, `view.hidden()` (missing or
    hidden) or `change.refusal()` (shown, but not to be changed)."""
    view.require()
    if change is not None:
        change.require()
    record = await records.get(view.collection.id, record_id)
    if record is None or not view.allows(record):
        raise view.hidden()
    if change is not None:
        change.permit(record)
    return record



def row_permission(principal: Principal | None, collection: Collection) -> Callable[[Record], bool]:
    """The create rule of `collection` for `principal`, decided per imported row (`@request.data`
    reads the row's values as JSON): the check answers False for a row the rule refuses (a failed
    row), and raises `field_refusal` (Forbidden naming the field) for a row naming a field whose
    `write_rule` refuses it, which refuses the whole file (decisions.md, Field rules: all or nothing)."""

    def permitted(record: Record) -> bool:
        create = check(principal, collection, actions.CREATE, represent.record_json(record))
        if not create.allows(record):
            return False
        if (field := create.refused_field(record_document(record))) is not None:
            raise create.field_refusal(field)
        return True

    return permitted
