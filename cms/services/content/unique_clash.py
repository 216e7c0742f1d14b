"""The answer to a write a unique index refused (docs/concepts/collections.md, "Unique fields"): the clash
itself only for a caller who may view a record holding the value, else the write rule's refusal."""

from __future__ import annotations

from cms.errors import AlreadyExists, CmsError
from cms.models import Collection, Record
from cms.services.access import VIEW, Access, check
from cms.services.content.locales import path_value
from cms.store.records import RecordRepository


async def clash_answer(records: RecordRepository, collection: Collection, record: Record, create: Access | None,
                   error: CmsError) -> CmsError:
    """The answer to a create (or an update) of `record` that a unique field refused with `error`
    (AlreadyExists naming the field), the one rule of docs/concepts/collections.md, "Unique fields":
    `error` itself for a caller who may view a record holding the value (admins; a view rule that shows
    it), else the write rule's refusal (`create.refusal()`, the create or update rule: 401 anonymous, else 403),
    which names neither the field nor the clash, so a caller who may not read a record cannot
    test guesses of its unique values. `error` as is for any other error, an internal key (no
    field named) or a write without a rule (`create` None: register, whose address clash is its
    own documented answer)."""
    if create is None or not isinstance(error, AlreadyExists) or not error.errors:
        return error
    view = check(create.principal, collection, VIEW)
    if view.everything:
        return error
    if not view.refused:
        field_name = next(iter(error.errors))
        value = record.data[field_name] if field_name in record.data else path_value(record.data, field_name)
        holders = await records.value_holders(
            collection.id, field_name, value, limit=len(value) if isinstance(value, list) else 1)
        if any(view.allows(holder) for holder in holders):
            return error
    return create.refusal()
