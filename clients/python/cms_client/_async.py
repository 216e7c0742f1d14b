"""`AsyncCmsClient`: the flows driven by an `httpx.AsyncClient`, with refresh-before-expiry and refresh-on-401.

`_sync.py` (`CmsClient`) is generated from `_async.py` by `scripts/unasync_client.py`: edit `_async.py`, then run
that script (a test checks that the two agree)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from cms_client import _auth, _drafts, _records, _resources
from cms_client._core import Call, Flow, build_request, decode, drive_async, network_error, segment
from cms_client._filter import FilterValue, bind_filter
from cms_client.auth_store import ADMIN_AUTH_PATH, AuthStore
from cms_client.realtime import AsyncRealtime
from cms_client.shapes import (
    AggregatePage,
    ApiKey,
    ApiKeyCreated,
    AuthAnswer,
    BatchAnswer,
    BulkDeleted,
    BulkUpdated,
    Collection,
    CsvImportResult,
    File,
    FileToken,
    Message,
    OAuthProvider,
    Record,
    RecordPage,
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

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
"""Seconds a request may take (connect, read, write, pool each), unless the client is given its own `http`."""
DEFAULT_REFRESH_MARGIN_S = 60.0
"""A call made when the access token expires within this many seconds refreshes the pair first."""

EventHooks = Mapping[str, list[Callable[..., Any]]]
"""httpx's event hooks: `{"request": [hook(request)], "response": [hook(response)]}` (coroutine functions for
the async client, plain ones for the sync client), called around every request the client sends."""


class AsyncTransport:
    """Sends calls for one client: credentials from the store (or the API key), a refresh first when the
    access token is about to expire, and one refresh and retry after a 401 to a call that carried a token.
    Refreshes never overlap: concurrent callers wait for the one under way and use its pair."""

    def __init__(self, base_url: str, store: AuthStore, api_key: str | None, http: httpx.AsyncClient,
                 refresh_margin_s: float | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.store = store
        self.api_key = api_key
        self.http = http
        self.refresh_margin_s = refresh_margin_s
        self._refresh_lock = asyncio.Lock()

    async def run(self, flow: Flow[T], timeout: float | None = None) -> T:
        """Drive `flow` to its result, each request within `timeout` seconds (None: the HTTP client's). Raises
        CmsError (an error answer) or CmsNetworkError (no answer, a time-out included)."""

        async def send(call: Call[Any]) -> Any:
            return await self.send(call, timeout)

        return await drive_async(flow, send)

    async def send(self, call: Call[T], timeout: float | None = None) -> T:
        """Send one call (refreshing as the class says) and decode its answer."""
        store = self.store
        margin = self.refresh_margin_s
        if call.auth and store.refresh_token and margin is not None and not store.is_valid(margin_s=margin):
            await self.refresh_shared(store.token)
        sent_token = store.token if call.auth else ""
        response = await self._send_once(call, timeout)
        if response.status_code == 401 and sent_token and store.refresh_token:
            await self.refresh_shared(sent_token)
            if store.token and store.token != sent_token:
                response = await self._send_once(call, timeout)
        return decode(call, response)

    async def refresh_shared(self, stale_token: str) -> None:
        """Refresh the pair unless another caller already replaced `stale_token` (then use theirs)."""
        async with self._refresh_lock:
            if self.store.token != stale_token or not self.store.refresh_token:
                return
            await drive_async(_auth.refresh(self.store), self._send_plain)

    async def refresh_now(self) -> Token:
        """Refresh the pair now, after any refresh under way. Raises CmsError 401 (not signed in, or refused)."""
        async with self._refresh_lock:
            return await drive_async(_auth.refresh(self.store), self._send_plain)

    async def _send_plain(self, call: Call[T]) -> T:
        return decode(call, await self._send_once(call))

    async def _send_once(self, call: Call[Any], timeout: float | None = None) -> httpx.Response:
        request = build_request(self.base_url, call, self.store, self.api_key, timeout)
        try:
            return await self.http.send(request)
        except httpx.TransportError as exc:
            raise network_error(exc, call) from exc


class AsyncAuth:
    """The calls of a user system: `client.auth` is the admin table's (`/api/v1/auth`); an auth collection's is
    `client.collection(name).auth` (`AsyncCollectionAuth`). A successful login fills the client's auth store;
    `refresh` and `logout` act on whichever user system the store is signed in to. Every method takes `timeout`
    (seconds for each request; None: the client's)."""

    collection: str | None = None
    """The auth collection's name; None for the admin table."""

    def __init__(self, transport: AsyncTransport, auth_path: str) -> None:
        self._t = transport
        self.auth_path = auth_path

    async def auth_with_password(self, email: str, password: str, *, timeout: float | None = None) -> AuthAnswer:
        """Sign in. With 2FA on, the answer has `requires_2fa` and an `mfa_token` for `verify_2fa` (and the
        store stays empty). CmsError 401 `invalid_credentials`."""
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "login",
                                             {"email": email, "password": password}), timeout)

    async def verify_2fa(self, mfa_token: str, code: str, *, timeout: float | None = None) -> AuthAnswer:
        """Complete a login that answered `requires_2fa` with a TOTP (or recovery) code. CmsError 400
        `otp_invalid` (wrong code), `token_invalid` / `token_expired` (the `mfa_token`)."""
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "2fa/verify",
                                             {"mfa_token": mfa_token, "code": code}), timeout)

    async def setup_2fa(self, *, timeout: float | None = None) -> TwoFactorSetup:
        """Start TOTP enrolment for the signed-in user: `{secret, otpauth_url, qr_svg}`."""
        return await self._t.run(_auth.setup_2fa(self.auth_path), timeout)

    async def enable_2fa(self, code: str, *, timeout: float | None = None) -> RecoveryCodes:
        """Turn TOTP on with a current code of the enrolled secret: `{recovery_codes}`."""
        return await self._t.run(_auth.enable_2fa(self.auth_path, code), timeout)

    async def disable_2fa(self, password: str, code: str, *, timeout: float | None = None) -> Message:
        """Turn TOTP off (password and a TOTP or recovery code)."""
        return await self._t.run(_auth.message(self.auth_path, "2fa/disable", {"password": password, "code": code}),
                                 timeout)

    async def oauth2_providers(self, redirect_uri: str | None = None, *,
                               timeout: float | None = None) -> list[OAuthProvider]:
        """The OAuth2 providers with `auth_url`, `state` and `code_verifier`; keep the chosen one for the callback.
        CmsError 403 when OAuth2 is off for this user system."""
        return await self._t.run(_auth.oauth2_providers(self.auth_path, redirect_uri), timeout)

    @staticmethod
    def oauth2_authorize_url(provider: OAuthProvider, redirect_uri: str | None = None) -> str:
        """Where to send the user for `provider` (see `_auth.authorize_url`)."""
        return _auth.authorize_url(provider, redirect_uri)

    async def auth_with_oauth2_code(self, provider: OAuthProvider, code: str, state: str,
                                    redirect_uri: str, *, timeout: float | None = None) -> AuthAnswer:
        """Complete an OAuth2 sign-in with the `code` and `state` the provider sent to `redirect_uri`.
        ValueError when `state` is not `provider`'s; CmsError from the service otherwise."""
        body = _auth.oauth2_callback_body(provider, code, state, redirect_uri)
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "oauth2/callback", body), timeout)

    async def refresh(self) -> Token:
        """Rotate the signed-in token pair now (the old refresh token is spent); the same as `client.refresh()`."""
        return await self._t.refresh_now()

    async def logout(self, *, timeout: float | None = None) -> None:
        """Revoke the signed-in session and clear the auth store (cleared also when the service refuses)."""
        await self._t.run(_auth.logout(self._t.store), timeout)

    async def me(self, *, timeout: float | None = None) -> dict[str, Any]:
        """The signed-in user as this user system shows it."""
        return await self._t.run(_auth.me(self.auth_path), timeout)

    async def register(self, email: str, password: str, *, timeout: float | None = None,
                       **fields: Any) -> dict[str, Any]:
        """Create a user: `{user, message}` (a verification email is queued; nobody is signed in)."""
        return await self._t.run(_auth.register(self.auth_path, email, password, fields), timeout)

    async def request_password_reset(self, email: str, *, timeout: float | None = None) -> Message:
        """Email a password-reset link to this user system's `email` (the same answer for any address)."""
        return await self._t.run(_auth.request_password_reset(email, self.collection), timeout)

    async def confirm_password_reset(self, token: str, password: str, password_confirm: str | None = None, *,
                                     timeout: float | None = None) -> Message:
        """Set a new password with the emailed token; the user's sessions are revoked. CmsError 400
        `token_invalid` / `token_expired`, 422 (password policy)."""
        return await self._t.run(_auth.confirm_password_reset(token, password, password_confirm), timeout)

    async def request_verification(self, *, timeout: float | None = None) -> Message:
        """Email the signed-in user a new verification link (older ones stop working); the message says when the
        address is already verified."""
        return await self._t.run(_auth.message(self.auth_path, "resend-verification"), timeout)

    async def confirm_verification(self, token: str, *, timeout: float | None = None) -> Message:
        """Verify an address with the emailed token. CmsError 400 `token_invalid` / `token_expired`."""
        return await self._t.run(_auth.message(self.auth_path, "verify-email", {"token": token}, auth=False),
                                 timeout)

    async def change_password(self, old_password: str, new_password: str, password_confirm: str | None = None, *,
                              timeout: float | None = None) -> Message:
        """Change the signed-in user's password; their other sessions are revoked, this one stays. CmsError 422
        (a wrong `old_password`, the policy)."""
        body: dict[str, Any] = {"old_password": old_password, "new_password": new_password}
        if password_confirm is not None:
            body["password_confirm"] = password_confirm
        return await self._t.run(_auth.message(self.auth_path, "me/change-password", body), timeout)

    async def list_sessions(self, *, timeout: float | None = None) -> list[Session]:
        """The signed-in user's active sessions (`current` marks this client's)."""
        return await self._t.run(_auth.list_sessions(self.auth_path), timeout)

    async def revoke_session(self, session_id: str, *, timeout: float | None = None) -> None:
        """Revoke one session of the signed-in user (this client's own: the store is cleared)."""
        await self._t.run(_auth.revoke_session(self._t.store, self.auth_path, session_id), timeout)

    async def revoke_other_sessions(self, *, timeout: float | None = None) -> int:
        """Revoke every session of the signed-in user but this client's; how many were revoked."""
        return await self._t.run(_auth.revoke_other_sessions(self.auth_path), timeout)

    async def revoke_all_sessions(self, *, timeout: float | None = None) -> None:
        """Revoke every session of the signed-in user, this client's included (the store is cleared)."""
        await self._t.run(_auth.revoke_all_sessions(self._t.store, self.auth_path), timeout)


class AsyncCollectionAuth(AsyncAuth):
    """The user system of an auth collection (`client.collection(name).auth`): the shared calls, plus the emailed
    one-time code (OTP) login and the email change."""

    def __init__(self, transport: AsyncTransport, collection: str) -> None:
        super().__init__(transport, f"/api/v1/collections/{segment(collection)}/auth")
        self.collection = collection

    async def request_otp(self, email: str, *, timeout: float | None = None) -> Message:
        """Email a 6-digit login code (auth collections with `otp_enabled`; the same answer for any address)."""
        return await self._t.run(_auth.message(self.auth_path, "otp/request", {"email": email}, auth=False),
                                 timeout)

    async def auth_with_otp(self, email: str, code: str, *, timeout: float | None = None) -> AuthAnswer:
        """Sign in with the emailed code. CmsError 400 `otp_invalid`, 403 `otp_disabled`."""
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "otp/verify",
                                             {"email": email, "code": code}), timeout)

    async def request_email_change(self, new_email: str, password: str, *, timeout: float | None = None) -> Message:
        """Email a confirmation link to `new_email` (the signed-in user's current `password` proves it is them)."""
        body = {"new_email": new_email, "password": password}
        return await self._t.run(_auth.message(self.auth_path, "me/request-email-change", body), timeout)

    async def confirm_email_change(self, token: str, *, timeout: float | None = None) -> Message:
        """Switch to the new address with the emailed token. CmsError 400 `token_invalid` / `token_expired`."""
        return await self._t.run(_auth.message(self.auth_path, "me/confirm-email-change", {"token": token},
                                               auth=False), timeout)


class AsyncCollection:
    """The records of one collection (`client.collection(name)`, a view collection's too); `auth` is its user
    system when it is an auth collection. Every method takes `timeout` (seconds for each request; None: the
    client's). Errors: CmsError 404 (no such collection or record), 403 (its rules refuse), 422 (`errors`)."""

    def __init__(self, transport: AsyncTransport, name: str) -> None:
        self._t = transport
        self.name = name
        self.auth = AsyncCollectionAuth(transport, name)

    async def get_list(self, page: int = 1, per_page: int = 30, *, filter: str | None = None,
                       sort: str | None = None, search: str | None = None, expand: str | None = None,
                       fields: str | None = None, skip_total: bool = False, locale: str | None = None,
                       draft: bool = False, timeout: float | None = None) -> RecordPage:
        """One page of records: `{items, total, page, per_page}` (see `_records.get_list`)."""
        return await self._t.run(_records.get_list(self.name, page, per_page, filter=filter, sort=sort,
                                                   search=search, expand=expand, fields=fields,
                                                   skip_total=skip_total, locale=locale, draft=draft), timeout)

    async def get_full_list(self, *, filter: str | None = None, sort: str | None = None,
                            search: str | None = None, expand: str | None = None, fields: str | None = None,
                            per_page: int = _records.FULL_LIST_PER_PAGE, locale: str | None = None,
                            draft: bool = False, timeout: float | None = None) -> list[Record]:
        """Every matching record, paging through."""
        return await self._t.run(_records.get_full_list(self.name, filter=filter, sort=sort, search=search,
                                                        expand=expand, fields=fields, per_page=per_page,
                                                        locale=locale, draft=draft), timeout)

    async def get_first_list_item(self, filter: str, *, sort: str | None = None, expand: str | None = None,
                                  fields: str | None = None, locale: str | None = None, draft: bool = False,
                                  timeout: float | None = None) -> Record:
        """The first record `filter` matches (bind values with `client.filter`). CmsError 404 when none does."""
        return await self._t.run(_records.get_first_list_item(self.name, filter, sort=sort, expand=expand,
                                                              fields=fields, locale=locale, draft=draft), timeout)

    async def get_one(self, record_id: str, *, expand: str | None = None, fields: str | None = None,
                      locale: str | None = None, draft: bool = False, timeout: float | None = None) -> Record:
        """One record (`draft`: its working copy)."""
        return await self._t.run(_records.get_one(self.name, record_id, expand=expand, fields=fields, locale=locale,
                                                  draft=draft), timeout)

    async def create(self, data: Mapping[str, Any], *, expand: str | None = None,
                     fields: str | None = None, locale: str | None = None,
                     files: _records.RecordFiles | None = None, timeout: float | None = None) -> Record:
        """Create a record (localized fields `locale`'s; with `files`: `{field: (filename, content, content_type)
        or a list}`, one multipart request, all or nothing); the stored record."""
        return await self._t.run(_records.create(self.name, data, expand=expand, fields=fields, locale=locale,
                                                 files=files), timeout)

    async def update(self, record_id: str, data: Mapping[str, Any], *, expand: str | None = None,
                     fields: str | None = None, locale: str | None = None,
                     files: _records.RecordFiles | None = None, timeout: float | None = None) -> Record:
        """Change fields of a record (`files` replace a file field's files; `field+` adds them; `"field-": [ids]`
        in `data` takes some out); the record after."""
        return await self._t.run(_records.update(self.name, record_id, data, expand=expand, fields=fields,
                                                 locale=locale, files=files), timeout)

    async def delete(self, record_id: str, *, timeout: float | None = None) -> None:
        """Delete a record."""
        await self._t.run(_records.delete(self.name, record_id), timeout)

    async def bulk_update(self, record_ids: Sequence[str], data: Mapping[str, Any], *,
                          timeout: float | None = None) -> BulkUpdated:
        """Set `data` on every listed record, all or nothing: `{updated}`."""
        return await self._t.run(_records.bulk_update(self.name, record_ids, data), timeout)

    async def bulk_delete(self, record_ids: Sequence[str], *, timeout: float | None = None) -> BulkDeleted:
        """Delete every listed record, all or nothing: `{deleted}`."""
        return await self._t.run(_records.bulk_delete(self.name, record_ids), timeout)

    async def import_csv(self, csv: str | bytes, *, filename: str = "import.csv",
                         timeout: float | None = None) -> CsvImportResult:
        """Create records from CSV: `{imported, failed: [{row, errors}]}`."""
        return await self._t.run(_records.import_csv(self.name, csv, filename=filename), timeout)

    async def export_csv(self, *, filter: str | None = None, sort: str | None = None,
                         search: str | None = None, locale: str | None = None, timeout: float | None = None) -> str:
        """The listable records as CSV text."""
        return await self._t.run(_records.export_csv(self.name, filter=filter, sort=sort, search=search,
                                                     locale=locale), timeout)

    async def aggregate(self, *, group_by: str | Sequence[str] | None = None,
                        aggregates: str | Sequence[str] | None = None, filter: str | None = None,
                        sort: str | None = None, page: int = 1, per_page: int = 30,
                        timeout: float | None = None) -> AggregatePage:
        """Groups of the listable records with counts, sums, ...: `{items: [{key, count, ...}], total, page,
        per_page}` (see `_records.aggregate`)."""
        return await self._t.run(_records.aggregate(self.name, group_by=group_by, aggregates=aggregates,
                                                    filter=filter, sort=sort, page=page, per_page=per_page), timeout)

    async def publish(self, record_id: str, at: _drafts.When | None = None, locale: str | None = None, *,
                      timeout: float | None = None) -> Record:
        """Publish the working copy now, or schedule it for `at` (a datetime or ISO 8601 text); the record."""
        return await self._t.run(_drafts.publish(self.name, record_id, at, locale), timeout)

    async def unpublish(self, record_id: str, *, timeout: float | None = None) -> Record:
        """Turn a published record back into a draft; the record."""
        return await self._t.run(_drafts.unpublish(self.name, record_id), timeout)

    async def discard_draft(self, record_id: str, *, timeout: float | None = None) -> None:
        """Drop the pending working copy (CmsError 404 when there is none)."""
        await self._t.run(_drafts.discard_draft(self.name, record_id), timeout)

    async def cancel_schedule(self, record_id: str, *, timeout: float | None = None) -> None:
        """Cancel the scheduled publish (CmsError 404 when none is pending)."""
        await self._t.run(_drafts.cancel_schedule(self.name, record_id), timeout)

    async def list_versions(self, record_id: str, page: int = 1, per_page: int = 30, *,
                            timeout: float | None = None) -> RecordVersionPage:
        """The record's versions, newest first: `{items: [{version, created, by, data}], total, page, per_page}`."""
        return await self._t.run(_drafts.list_versions(self.name, record_id, page, per_page), timeout)

    async def get_version(self, record_id: str, version: int, *, timeout: float | None = None) -> RecordVersion:
        """One version of the record."""
        return await self._t.run(_drafts.get_version(self.name, record_id, version), timeout)

    async def restore_version(self, record_id: str, version: int, *, timeout: float | None = None) -> Record:
        """Write a version's data over the record (its working copy, with drafts); the record."""
        return await self._t.run(_drafts.restore_version(self.name, record_id, version), timeout)


class AsyncBatch(_records.BatchBuilder):
    """`client.batch()`: add requests (`.collection(name).create(...)`, chainable), then `send()` posts them as one
    all-or-nothing transaction."""

    def __init__(self, transport: AsyncTransport) -> None:
        super().__init__()
        self._t = transport

    async def send(self, *, timeout: float | None = None) -> list[BatchAnswer]:
        """One `{status, body}` per request; BatchError 400 when one fails (then nothing is stored)."""
        return await self._t.run(self.flow(), timeout)


class AsyncCollections:
    """`client.collections`: the collection definitions (admins)."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self, *, timeout: float | None = None) -> list[Collection]:
        """Every collection."""
        return await self._t.run(_resources.collections_list(), timeout)

    async def create(self, definition: Mapping[str, Any], *, timeout: float | None = None) -> Collection:
        """Create a collection (`{name, type?, schema, ...}`)."""
        return await self._t.run(_resources.collections_create(definition), timeout)

    async def delete(self, id_or_name: str, *, timeout: float | None = None) -> None:
        """Delete a collection and its records."""
        await self._t.run(_resources.collections_delete(id_or_name), timeout)


class AsyncFiles:
    """`client.files`: files attached to records."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def upload(self, collection: str, record_id: str, content: bytes, filename: str,
                     content_type: str = "application/octet-stream", *, field: str | None = None,
                     timeout: float | None = None) -> File:
        """Attach `content` to a record (`field`: for that file field): the file's description (`id`, `size`, ...)."""
        return await self._t.run(_resources.files_upload(collection, record_id, content, filename, content_type,
                                                         field), timeout)

    async def token(self, *, timeout: float | None = None) -> FileToken:
        """A file token of the caller, `{token, expires}` (2 minutes): `?token=` on a protected field's file."""
        return await self._t.run(_resources.files_token(), timeout)

    async def get_token(self, *, timeout: float | None = None) -> str:
        """A file token of the caller (2 minutes), for `get_url(..., token=)`."""
        return (await self.token(timeout=timeout))["token"]

    def url(self, file_id: str) -> str:
        """The absolute URL of a file's bytes (send credentials with it when its record is not public)."""
        return self._t.base_url + _resources.files_path(file_id)

    def get_url(self, record: Record | None, file_id: str | None, *, thumb: str | None = None,
                format: str | None = None, token: str | None = None) -> str:
        """The absolute URL of a file of `record`, a thumbnail of it (`thumb`, `format`), with a file token
        (`token`) for a protected field's file; `""` for a missing record or file; makes no request (see
        `_resources.files_url`)."""
        return _resources.files_url(self._t.base_url, record, file_id, thumb=thumb, format=format, token=token)

    async def download(self, file_id: str, *, timeout: float | None = None) -> bytes:
        """A file's bytes, fetched with the client's credentials."""
        return await self._t.run(_resources.files_download(file_id), timeout)

    async def delete(self, file_id: str, *, timeout: float | None = None) -> None:
        """Delete a file."""
        await self._t.run(_resources.files_delete(file_id), timeout)


class AsyncApiKeys:
    """`client.api_keys`: API keys of admin-table users."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def create(self, name: str, scopes: Sequence[str] = ("read",), *,
                     expires_at: str | None = None, timeout: float | None = None) -> ApiKeyCreated:
        """Create a key (`scopes` of `read`, `write`; `expires_at` ISO 8601); its `key` is shown only here."""
        return await self._t.run(_resources.api_keys_create(name, scopes, expires_at), timeout)

    async def list(self, *, timeout: float | None = None) -> list[ApiKey]:
        """The caller's keys."""
        return await self._t.run(_resources.api_keys_list(), timeout)

    async def delete(self, key_id: str, *, timeout: float | None = None) -> None:
        """Revoke a key."""
        await self._t.run(_resources.api_keys_delete(key_id), timeout)


class AsyncSettings:
    """`client.settings`: the service's runtime settings (admin), as the JS client's `settings`."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self, *, timeout: float | None = None) -> list[Setting]:
        """Every setting `{key, value, category}`."""
        return await self._t.run(_resources.settings_list(), timeout)

    async def set(self, key: str, value: bool | int | str, *, timeout: float | None = None) -> Setting:
        """Set one (`value` a boolean, an integer or its string form); CmsError 422 for an unknown key or value."""
        return await self._t.run(_resources.settings_set(key, value), timeout)


class AsyncReleases:
    """`client.releases`: several records' working copies published at once (admins)."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self, page: int = 1, per_page: int = 30, *, timeout: float | None = None) -> ReleasePage:
        """One page of releases, newest first: `{items, total, page, per_page}`."""
        return await self._t.run(_drafts.releases_list(page, per_page), timeout)

    async def get_one(self, release_id: str, *, timeout: float | None = None) -> Release:
        """One release."""
        return await self._t.run(_drafts.releases_get_one(release_id), timeout)

    async def create(self, name: str, items: Sequence[ReleaseItemInput], *,
                     timeout: float | None = None) -> Release:
        """Create a release of `items` (`{collection, record_id}`)."""
        return await self._t.run(_drafts.releases_create(name, items), timeout)

    async def update(self, release_id: str, changes: Mapping[str, Any], *, timeout: float | None = None) -> Release:
        """Change a release (`name`, `items`)."""
        return await self._t.run(_drafts.releases_update(release_id, changes), timeout)

    async def delete(self, release_id: str, *, timeout: float | None = None) -> None:
        """Delete a release."""
        await self._t.run(_drafts.releases_delete(release_id), timeout)

    async def publish(self, release_id: str, at: _drafts.When | None = None, *,
                      timeout: float | None = None) -> Release:
        """Publish every item at once (all or nothing), or schedule that for `at`."""
        return await self._t.run(_drafts.releases_publish(release_id, at), timeout)

    async def cancel_schedule(self, release_id: str, *, timeout: float | None = None) -> None:
        """Cancel the release's scheduled publish."""
        await self._t.run(_drafts.releases_cancel_schedule(release_id), timeout)


class AsyncSchema:
    """`client.schema`: the schema as code (admins; decisions.md, Schema as code)."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def export(self, *, timeout: float | None = None) -> SchemaSnapshot:
        """The snapshot `{format, hash, collections}`."""
        return await self._t.run(_resources.schema_export(), timeout)

    async def diff(self, snapshot: Mapping[str, Any], *, timeout: float | None = None) -> SchemaDiff:
        """The changes `snapshot` would make, and the current `hash` to apply them against."""
        return await self._t.run(_resources.schema_diff(snapshot), timeout)

    async def apply(self, snapshot: Mapping[str, Any], *, hash: str | None = None, allow_data_loss: bool = False,
                    timeout: float | None = None) -> SchemaSnapshot:
        """Apply `snapshot` against `hash` (a diff's; None: the current one); the new snapshot (see
        `_resources.schema_apply`)."""
        return await self._t.run(_resources.schema_apply(snapshot, hash, allow_data_loss), timeout)


class AsyncCmsClient:
    """The client of one CMS service at `base_url` (for example `http://127.0.0.1:8090`).

    `auth_store` keeps the sign-in (a new `AuthStore` by default); `api_key` (`cms_...`) is sent as `X-API-Key`
    while nobody is signed in; `http` replaces the `httpx.AsyncClient` (the client then does not close it);
    `timeout_s` and `event_hooks` (`{"request": [...], "response": [...]}`, see `EventHooks`) configure the one
    it makes otherwise (ValueError with both `http` and `event_hooks`); `refresh_margin_s` (None: only on a 401)
    is how long before its expiry the access token is refreshed. Use `async with AsyncCmsClient(...) as client:`
    or call `aclose()`."""

    def __init__(self, base_url: str, *, auth_store: AuthStore | None = None, api_key: str | None = None,
                 http: httpx.AsyncClient | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 event_hooks: EventHooks | None = None,
                 refresh_margin_s: float | None = DEFAULT_REFRESH_MARGIN_S) -> None:
        if http is not None and event_hooks is not None:
            raise ValueError("event_hooks configure the HTTP client this client makes: set them on `http` instead")
        self._owns_http = http is None
        self.auth_store = auth_store if auth_store is not None else AuthStore()
        http = http or httpx.AsyncClient(timeout=timeout_s, event_hooks=dict(event_hooks or {}))
        self._t = AsyncTransport(base_url, self.auth_store, api_key, http, refresh_margin_s)
        self.base_url = self._t.base_url
        self.auth = AsyncAuth(self._t, ADMIN_AUTH_PATH)
        self.collections = AsyncCollections(self._t)
        self.files = AsyncFiles(self._t)
        self.api_keys = AsyncApiKeys(self._t)
        self.settings = AsyncSettings(self._t)
        self.releases = AsyncReleases(self._t)
        self.schema = AsyncSchema(self._t)
        self.realtime = AsyncRealtime(self._t)

    def collection(self, name: str) -> AsyncCollection:
        """The records of collection `name` (and, for an auth collection, its user system as `.auth`)."""
        return AsyncCollection(self._t, name)

    def batch(self) -> AsyncBatch:
        """A new batch builder."""
        return AsyncBatch(self._t)

    @staticmethod
    def filter(expr: str, params: Mapping[str, FilterValue] | None = None) -> str:
        """`expr` with each `{:name}` replaced by `params[name]` as a filter literal, so that no value changes the
        filter's shape: `client.filter("title = {:t} && views > {:n}", {"t": title, "n": 10})` (see
        `_filter.bind_filter`). KeyError for a placeholder without a value, TypeError for an unbindable value."""
        return bind_filter(expr, params)

    async def refresh(self) -> Token:
        """Rotate the token pair of the signed-in user system now (the old refresh token is spent); concurrent
        refreshes share one request."""
        return await self._t.refresh_now()

    async def health(self, *, timeout: float | None = None) -> dict[str, Any]:
        """The service's health: `{status, mongodb, redis, version}`."""
        return await self._t.run(_resources.health(), timeout)

    async def aclose(self) -> None:
        """Stop realtime and close the HTTP client (when the client made it)."""
        await self.realtime.close()
        if self._owns_http:
            await self._t.http.aclose()

    async def __aenter__(self) -> AsyncCmsClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()
