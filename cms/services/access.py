"""Who may see and change which records (decisions.md, Identity and tokens: "The records of an
auth collection (its users) are listed, viewed, changed and deleted only by that user and by
admins"). Pure: no I/O.

Today the only restriction is the built-in rule of auth collections, `id = @request.auth.id`;
the access-rules issue generalizes this module to the five rules of every collection. Records
of base collections are visible to everyone and writable by any authenticated principal (the API
guard checks authentication).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cms.models import ROLE_ADMIN, Collection, Principal

AUTH_TYPE = "auth"


@dataclass(frozen=True)
class RecordScope:
    """The records of one collection a principal may reach: every record (`ids` None), or only
    the records whose ids are in `ids` (possibly none)."""

    ids: frozenset[str] | None = None

    @property
    def unrestricted(self) -> bool:
        """True when every record of the collection is in scope."""
        return self.ids is None

    def allows(self, record_id: str) -> bool:
        """Whether the record with this id is in scope."""
        return self.ids is None or record_id in self.ids

    def refused(self, record_ids: Sequence[str]) -> list[str]:
        """The ids of `record_ids` outside the scope, in the given order."""
        return [] if self.ids is None else [i for i in record_ids if i not in self.ids]


EVERYTHING = RecordScope()
NOTHING = RecordScope(frozenset())


def acts_as_admin(principal: Principal) -> bool:
    """An admin-table user with role `admin`, or an API key acting for one (records and files)."""
    return principal.kind in ("admin_user", "api_key") and principal.role == ROLE_ADMIN


def record_scope(principal: Principal | None, collection: Collection) -> RecordScope:
    """The records of `collection` that `principal` (None: no credentials) may list, view, change
    and delete. Admins reach every record; in an auth collection anyone else reaches only their
    own user record (a user of that collection), or nothing (an API key acts as its user); in a base collection everyone
    reaches every record."""
    if collection.type != AUTH_TYPE or (principal is not None and acts_as_admin(principal)):
        return EVERYTHING
    if principal is not None and principal.kind == "collection_user" and principal.collection_id == collection.id:
        return RecordScope(frozenset({principal.user_id}))
    return NOTHING
