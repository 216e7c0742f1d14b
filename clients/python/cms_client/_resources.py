"""The flows of collections, files, API keys, realtime subscriptions and health."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from cms_client._core import Call, Flow, ask, segment
from cms_client.shapes import (
    ApiKey,
    ApiKeyCreated,
    Collection,
    File,
    FileToken,
    Record,
    SchemaDiff,
    SchemaSnapshot,
    Setting,
)


def collections_list() -> Flow[list[Collection]]:
    """Every collection (admins)."""
    return (yield from ask(Call[list[Collection]]("GET", "/api/v1/collections")))


def collections_create(definition: Mapping[str, Any]) -> Flow[Collection]:
    """Create a collection (admins) from `{name, type?, schema: [field, ...], *_rule?, otp_enabled?, ...}`."""
    return (yield from ask(Call[Collection]("POST", "/api/v1/collections", json_body=dict(definition))))


def collections_delete(id_or_name: str) -> Flow[None]:
    """Delete a collection and its records (admins)."""
    return (yield from ask(Call[None]("DELETE", f"/api/v1/collections/{segment(id_or_name)}", expect="none")))


def files_upload(collection: str, record_id: str, content: bytes, filename: str,
                 content_type: str, field: str | None = None) -> Flow[File]:
    """Attach a file to a record (multipart; `field`: a file field, whose checks apply and which may then hold
    it): `{id, filename, content_type, size, collection, record_id, field, created}`."""
    form = {"collection": collection, "record_id": record_id, **({"field": field} if field else {})}
    return (yield from ask(Call[File]("POST", "/api/v1/files", files={"file": (filename, content, content_type)},
                                      form=form)))


def files_token() -> Flow[FileToken]:
    """A file token of the caller (`{token, expires}`, 2 minutes): `?token=` shows a protected field's file."""
    return (yield from ask(Call[FileToken]("POST", "/api/v1/files/token")))


def files_path(file_id: str) -> str:
    """The path of a file's bytes."""
    return f"/api/v1/files/{segment(file_id)}"


def files_url(base_url: str, record: Record | None, file_id: str | None, *, thumb: str | None = None,
              format: str | None = None, token: str | None = None) -> str:
    """The absolute URL of file `file_id` of `record` (an id its file field holds): `thumb` (`100x100` or a size
    of the field's `thumbs`), `format` (`webp`, `avif`, `png`, `jpeg`), `token` (a file token: a protected field's
    file without headers). `""` when `record` or `file_id` is missing (a field without a file), as the JS
    client's `getURL`. Makes no request."""
    if not record or not file_id:
        return ""
    query = {key: value for key, value in (("thumb", thumb), ("format", format), ("token", token)) if value}
    return base_url + files_path(file_id) + ("?" + urlencode(query) if query else "")


def files_download(file_id: str) -> Flow[bytes]:
    """A file's bytes (visible like its record)."""
    return (yield from ask(Call[bytes]("GET", files_path(file_id), headers={"Accept": "*/*"}, expect="bytes")))


def files_delete(file_id: str) -> Flow[None]:
    """Delete a file."""
    return (yield from ask(Call[None]("DELETE", files_path(file_id), expect="none")))


def api_keys_create(name: str, scopes: Sequence[str], expires_at: str | None) -> Flow[ApiKeyCreated]:
    """Create an API key (admin-table users); its secret `key` (`cms_...`) is in this answer only."""
    body: dict[str, Any] = {"name": name, "scopes": list(scopes)}
    if expires_at is not None:
        body["expires_at"] = expires_at
    return (yield from ask(Call[ApiKeyCreated]("POST", "/api/v1/api-keys", json_body=body)))


def api_keys_list() -> Flow[list[ApiKey]]:
    """The caller's API keys (an admin sees all), without their secrets."""
    return (yield from ask(Call[list[ApiKey]]("GET", "/api/v1/api-keys")))


def api_keys_delete(key_id: str) -> Flow[None]:
    """Revoke an API key: it stops working at once."""
    return (yield from ask(Call[None]("DELETE", f"/api/v1/api-keys/{segment(key_id)}", expect="none")))


def settings_list() -> Flow[list[Setting]]:
    """Every setting `{key, value, category}` (admin; values as strings: `true`, `8`)."""
    return (yield from ask(Call[list[Setting]]("GET", "/api/v1/settings")))


def settings_set(key: str, value: bool | int | str) -> Flow[Setting]:
    """Set one setting (admin; `value` a boolean, an integer or its string form); 422 for an unknown key
    or a bad value, applied on every replica at once."""
    return (yield from ask(Call[Setting]("POST", "/api/v1/settings", json_body={"key": key, "value": value})))


def realtime_subscribe(client_id: str, topics: Sequence[str]) -> Flow[None]:
    """Set the realtime client's subscriptions (replacing the previous set) with the caller's credentials (204)."""
    body = {"client_id": client_id, "subscriptions": list(topics)}
    return (yield from ask(Call[None]("POST", "/api/v1/realtime", json_body=body, expect="none")))


def schema_export() -> Flow[SchemaSnapshot]:
    """The schema snapshot (admins): `{format, hash, collections}` (decisions.md, Schema as code)."""
    return (yield from ask(Call[SchemaSnapshot]("GET", "/api/v1/schema")))


def schema_diff(snapshot: Mapping[str, Any]) -> Flow[SchemaDiff]:
    """The changes `snapshot` would make: `{hash (the current one), changes: [{op, collection, field, from, to,
    data_loss}]}`."""
    return (yield from ask(Call[SchemaDiff]("POST", "/api/v1/schema/diff", json_body=dict(snapshot))))


def schema_apply(snapshot: Mapping[str, Any], hash: str | None = None,
                 allow_data_loss: bool = False) -> Flow[SchemaSnapshot]:
    """Apply `snapshot`, all or nothing, against `hash` (a diff's; None: diff first and use the current hash, which
    gives up the check that nobody changed the schema since you looked); the new snapshot. CmsError 409
    `conflict` (the hash is not current), 422 (changes losing data without `allow_data_loss`, a bad snapshot)."""
    if hash is None:
        hash = (yield from schema_diff(snapshot))["hash"]
    body = {"hash": hash, "snapshot": dict(snapshot), "allow_data_loss": allow_data_loss}
    return (yield from ask(Call[SchemaSnapshot]("POST", "/api/v1/schema/apply", json_body=body)))


def health() -> Flow[dict[str, Any]]:
    """`{status, mongodb, redis, version}` (CmsError 503 naming the failing part)."""
    return (yield from ask(Call[dict[str, Any]]("GET", "/health", auth=False)))
