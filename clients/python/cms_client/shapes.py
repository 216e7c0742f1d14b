"""The shapes the client's methods take and return: the generated models, plus records typed for use.

A record is open (`additionalProperties: true`: its collection's fields), which a TypedDict cannot say to
mypy yet (PEP 728 `extra_items`), so a record is a plain `dict[str, Any]` and a page of them is `RecordPage`,
whose keys are the generated `models.RecordPage`'s (a test compares them).
"""

from __future__ import annotations

from typing import Any, TypeAlias, TypedDict

from cms_client._generated.models import (
    AggregateGroup,
    AggregatePage,
    ApiKey,
    ApiKeyCreated,
    BatchAnswer,
    BulkDeleted,
    BulkUpdated,
    Collection,
    CollectionLoginResponse,
    CsvImportResult,
    File,
    FileToken,
    LoginResponse,
    Message,
    OAuthProvider,
    RecordVersion,
    RecordVersionPage,
    RecoveryCodes,
    Release,
    ReleaseItemInput,
    ReleasePage,
    SchemaDiff,
    SchemaSnapshot,
    Session,
    Setting,
    Token,
    TwoFactorSetup,
)

Record: TypeAlias = dict[str, Any]
"""A record: `{id, created, updated, ...its collection's fields}`, plus `expand` when asked for."""

AuthAnswer: TypeAlias = LoginResponse | CollectionLoginResponse
"""A login's answer (`{user, token, message, requires_2fa, mfa_token?}`), of either user system."""


class RecordPage(TypedDict):
    """One page of records: `items` in order, `total` matches (-1 with `skip_total`), 1-based `page`, `per_page`."""

    items: list[Record]
    total: int
    page: int
    per_page: int


__all__ = [
    "AggregateGroup", "AggregatePage", "ApiKey", "ApiKeyCreated", "AuthAnswer", "BatchAnswer", "BulkDeleted",
    "BulkUpdated", "Collection",
    "CollectionLoginResponse", "CsvImportResult", "File", "FileToken",
    "LoginResponse", "Message", "OAuthProvider", "Record",
    "RecordPage", "RecordVersion", "RecordVersionPage", "RecoveryCodes", "Release", "ReleaseItemInput",
    "ReleasePage", "SchemaDiff", "SchemaSnapshot",
    "Session", "Setting", "Token", "TwoFactorSetup",
]
