"""What one user would see of one record (the admin UI's "view as"; decisions.md, Field rules): decided
by `access.check` alone, the same decision the API makes for that user's own requests."""

from __future__ import annotations

from dataclasses import dataclass

from cms.models import Collection, Principal, Record
from cms.services import access as actions
from cms.services.access import AUTH_TYPE, EMAIL_FIELD, check, record_document


@dataclass(frozen=True)
class RecordSight:
    """One record as a `viewer` (None: anonymous) would get it: `viewable` (the view rule shows it to
    them), `listed` (the list rule does), `fields` (the collection's fields in schema order, `email`
    last for an auth collection) and `hidden` (those of `fields` whose value their field rules leave
    out of the record, whether or not the record itself is shown)."""

    viewer: Principal | None
    viewable: bool
    listed: bool
    fields: tuple[str, ...]
    hidden: frozenset[str]


def sight(viewer: Principal | None, collection: Collection, record: Record) -> RecordSight:
    """What `viewer` would see of `record` of `collection`: `access.check` of view and list, and the
    view's field rules on the stored record. Raises nothing."""
    view = check(viewer, collection, actions.VIEW)
    names = tuple(spec.name for spec in collection.fields)
    if collection.type == AUTH_TYPE:
        names = (*names, EMAIL_FIELD)
    return RecordSight(viewer=viewer, viewable=view.allows(record),
                       listed=check(viewer, collection, actions.LIST).allows(record),
                       fields=names, hidden=view.fields.hidden(record_document(record)))
