"""The checks of a collection definition that are not its fields' (fields.py), rules' (access) or
indexes' (indexes.py): its name, the login switches of auth collections, drafts."""

from __future__ import annotations

from cms.errors import ValidationFailed
from cms.models import Collection
from cms.services.content.fields import NAME_PATTERN
from cms.services.representation.records import DRAFT_KEYS

COLLECTION_TYPES = ("base", "auth")
"""The types of a collection with records of its own (a view's are computed)."""


AUTH_SWITCHES = {"otp_enabled": "Only auth collections have OTP login.",
                 "mfa_enabled": "Only auth collections have two-factor login.",
                 "oauth_enabled": "Only auth collections have OAuth2 login."}
"""The login switches an auth collection carries (copied from the global settings at creation)."""


def check_auth_switches(type_: str, **switches: bool | None) -> None:
    """`otp_enabled` and `mfa_enabled` are settings of auth collections; true on a base collection
    raises ValidationFailed naming each (false is accepted as the no-op it is)."""
    wrong = {name: [AUTH_SWITCHES[name]] for name, on in switches.items() if on and type_ != "auth"}
    if wrong:
        raise ValidationFailed(f"{', '.join(wrong)} applies to auth collections only", errors=wrong)


def check_name(name: str) -> None:
    """Collection names: `^[A-Za-z][A-Za-z0-9_]{0,62}$`. Raises ValidationFailed."""
    if not NAME_PATTERN.match(name):
        raise ValidationFailed(
            "Invalid collection name",
            errors={"name": ["Must start with a letter and contain only letters, digits and '_' (max 63)."]},
        )


def check_drafts(drafts_on: bool, collection: Collection) -> None:
    """A collection with drafts is a base collection (of a service with drafts: `drafts_on`) whose fields
    do not take the names of the draft keys of its records' JSON (`status`, `published_at`, ...). Raises
    ValidationFailed."""
    if not collection.drafts:
        return
    if collection.type != "base" or not drafts_on:
        raise ValidationFailed("Only base collections have drafts",
                               errors={"drafts": ["Only base collections have drafts."]})
    taken = [spec.name for spec in collection.fields if spec.name in DRAFT_KEYS]
    if taken:
        raise ValidationFailed("A collection with drafts reserves the field names " + ", ".join(DRAFT_KEYS),
                               errors={"schema": [f"{name}: the name is reserved in a collection with drafts"
                                                  for name in taken]})
