"""`AsyncCmsClient`: the flows driven by an `httpx.AsyncClient`, with refresh-before-expiry and refresh-on-401."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from cms_client import _auth, _records, _resources
from cms_client._core import Call, Flow, build_request, decode, drive_async, network_error, segment
from cms_client.auth_store import ADMIN_AUTH_PATH, AuthStore
from cms_client.realtime import AsyncRealtime
from cms_client.shapes import (
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
    RecoveryCodes,
    Token,
    TwoFactorSetup,
)

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
"""Seconds a request may take (connect, read, write, pool each), unless the client is given its own `http`."""
DEFAULT_REFRESH_MARGIN_S = 60.0
"""A call made when the access token expires within this many seconds refreshes the pair first."""


class AsyncTransport:
    """Sends calls for one async client: credentials from the store (or the API key), a refresh first when the
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

    async def run(self, flow: Flow[T]) -> T:
        """Drive `flow` to its result. Raises CmsError (an error answer) or NetworkError (no answer)."""
        return await drive_async(flow, self.send)

    async def send(self, call: Call[T]) -> T:
        """Send one call (refreshing as the class says) and decode its answer."""
        store = self.store
        margin = self.refresh_margin_s
        if call.auth and store.refresh_token and margin is not None and not store.is_valid(margin_s=margin):
            await self.refresh_shared(store.token)
        sent_token = store.token if call.auth else ""
        response = await self._send_once(call)
        if response.status_code == 401 and sent_token and store.refresh_token:
            await self.refresh_shared(sent_token)
            if store.token and store.token != sent_token:
                response = await self._send_once(call)
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

    async def _send_once(self, call: Call[Any]) -> httpx.Response:
        request = build_request(self.base_url, call, self.store, self.api_key)
        try:
            return await self.http.send(request)
        except httpx.TransportError as exc:
            raise network_error(exc, call) from exc


class AsyncAuth:
    """The sign-in calls of a user system: `client.auth` is the admin table's (`/api/v1/auth`); an auth collection's
    is `client.collection(name).auth` (an `AsyncCollectionAuth`). A successful login fills the client's auth store;
    `refresh` and `logout` act on whichever user system the store is signed in to."""

    def __init__(self, transport: AsyncTransport, auth_path: str) -> None:
        self._t = transport
        self.auth_path = auth_path

    async def auth_with_password(self, email: str, password: str) -> AuthAnswer:
        """Sign in. With 2FA on, the answer has `requires_2fa` and an `mfa_token` for `verify_2fa` (and the
        store stays empty). CmsError 401 `invalid_credentials`."""
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "login",
                                             {"email": email, "password": password}))

    async def verify_2fa(self, mfa_token: str, code: str) -> AuthAnswer:
        """Complete a login that answered `requires_2fa` with a TOTP (or recovery) code. CmsError 400
        `otp_invalid` (wrong code), `token_invalid` / `token_expired` (the `mfa_token`)."""
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "2fa/verify",
                                             {"mfa_token": mfa_token, "code": code}))

    async def setup_2fa(self) -> TwoFactorSetup:
        """Start TOTP enrolment for the signed-in user: `{secret, otpauth_url, qr_svg}`."""
        return await self._t.run(_auth.setup_2fa(self.auth_path))

    async def enable_2fa(self, code: str) -> RecoveryCodes:
        """Turn TOTP on with a current code of the enrolled secret: `{recovery_codes}`."""
        return await self._t.run(_auth.enable_2fa(self.auth_path, code))

    async def disable_2fa(self, password: str, code: str) -> Message:
        """Turn TOTP off (password and a TOTP or recovery code)."""
        return await self._t.run(_auth.message(self.auth_path, "2fa/disable", {"password": password, "code": code}))

    async def oauth2_providers(self, redirect_uri: str | None = None) -> list[OAuthProvider]:
        """The OAuth2 providers with `auth_url`, `state` and `code_verifier`; keep the chosen one for the callback.
        CmsError 403 when OAuth2 is off for this user system."""
        return await self._t.run(_auth.oauth2_providers(self.auth_path, redirect_uri))

    @staticmethod
    def oauth2_authorize_url(provider: OAuthProvider, redirect_uri: str | None = None) -> str:
        """Where to send the user for `provider` (see `_auth.authorize_url`)."""
        return _auth.authorize_url(provider, redirect_uri)

    async def auth_with_oauth2_code(self, provider: OAuthProvider, code: str, state: str,
                                    redirect_uri: str) -> AuthAnswer:
        """Complete an OAuth2 sign-in with the `code` and `state` the provider sent to `redirect_uri`.
        ValueError when `state` is not `provider`'s; CmsError from the service otherwise."""
        body = _auth.oauth2_callback_body(provider, code, state, redirect_uri)
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "oauth2/callback", body))

    async def refresh(self) -> Token:
        """Rotate the signed-in token pair now (the old refresh token is spent); the same as `client.refresh()`."""
        return await self._t.refresh_now()

    async def logout(self) -> None:
        """Revoke the signed-in session and clear the auth store (cleared also when the service refuses)."""
        await self._t.run(_auth.logout(self._t.store))

    async def me(self) -> dict[str, Any]:
        """The signed-in user as this user system shows it."""
        return await self._t.run(_auth.me(self.auth_path))

    async def register(self, email: str, password: str, **fields: Any) -> dict[str, Any]:
        """Create a user: `{user, message}` (a verification email is queued; nobody is signed in)."""
        return await self._t.run(_auth.register(self.auth_path, email, password, fields))


class AsyncCollectionAuth(AsyncAuth):
    """The user system of an auth collection (`client.collection(name).auth`): the shared calls, plus the emailed
    one-time code (OTP) login."""

    def __init__(self, transport: AsyncTransport, collection: str) -> None:
        super().__init__(transport, f"/api/v1/collections/{segment(collection)}/auth")
        self.collection = collection

    async def request_otp(self, email: str) -> Message:
        """Email a 6-digit login code (auth collections with `otp_enabled`; the same answer for any address)."""
        return await self._t.run(_auth.message(self.auth_path, "otp/request", {"email": email}, auth=False))

    async def auth_with_otp(self, email: str, code: str) -> AuthAnswer:
        """Sign in with the emailed code. CmsError 400 `otp_invalid`, 403 `otp_disabled`."""
        return await self._t.run(_auth.login(self._t.store, self.auth_path, "otp/verify",
                                             {"email": email, "code": code}))


class AsyncCollection:
    """The records of one collection (`client.collection(name)`); `auth` is its user system when it is an auth
    collection. Errors: CmsError 404 (no such collection or record), 403 (its rules refuse), 422 (`errors`)."""

    def __init__(self, transport: AsyncTransport, name: str) -> None:
        self._t = transport
        self.name = name
        self.auth = AsyncCollectionAuth(transport, name)

    async def get_list(self, page: int = 1, per_page: int = 30, *, filter: str | None = None,
                       sort: str | None = None, search: str | None = None, expand: str | None = None,
                       fields: str | None = None, skip_total: bool = False,
                       locale: str | None = None) -> RecordPage:
        """One page of records: `{items, total, page, per_page}` (see `_records.get_list`)."""
        return await self._t.run(_records.get_list(self.name, page, per_page, filter=filter, sort=sort,
                                                   search=search, expand=expand, fields=fields,
                                                   skip_total=skip_total, locale=locale))

    async def get_full_list(self, *, filter: str | None = None, sort: str | None = None,
                            search: str | None = None, expand: str | None = None, fields: str | None = None,
                            per_page: int = _records.FULL_LIST_PER_PAGE, locale: str | None = None) -> list[Record]:
        """Every matching record, paging through."""
        return await self._t.run(_records.get_full_list(self.name, filter=filter, sort=sort, search=search,
                                                        expand=expand, fields=fields, per_page=per_page,
                                                        locale=locale))

    async def get_one(self, record_id: str, *, expand: str | None = None, fields: str | None = None,
                locale: str | None = None) -> Record:
        """One record."""
        return await self._t.run(_records.get_one(self.name, record_id, expand=expand, fields=fields, locale=locale))

    async def create(self, data: Mapping[str, Any], *, expand: str | None = None,
                     fields: str | None = None, locale: str | None = None,
                     files: _records.RecordFiles | None = None) -> Record:
        """Create a record (localized fields `locale`'s; with `files`: `{field: (filename, content, content_type)
        or a list}`, one multipart request, all or nothing); the stored record."""
        return await self._t.run(_records.create(self.name, data, expand=expand, fields=fields, locale=locale,
                                                 files=files))

    async def update(self, record_id: str, data: Mapping[str, Any], *, expand: str | None = None,
                     fields: str | None = None, locale: str | None = None,
                     files: _records.RecordFiles | None = None) -> Record:
        """Change fields of a record (`files` replace a file field's files; `field+` adds them); the record after."""
        return await self._t.run(_records.update(self.name, record_id, data, expand=expand, fields=fields,
                                                 locale=locale, files=files))

    async def delete(self, record_id: str) -> None:
        """Delete a record."""
        await self._t.run(_records.delete(self.name, record_id))

    async def bulk_update(self, record_ids: Sequence[str], data: Mapping[str, Any]) -> BulkUpdated:
        """Set `data` on every listed record, all or nothing: `{updated}`."""
        return await self._t.run(_records.bulk_update(self.name, record_ids, data))

    async def bulk_delete(self, record_ids: Sequence[str]) -> BulkDeleted:
        """Delete every listed record, all or nothing: `{deleted}`."""
        return await self._t.run(_records.bulk_delete(self.name, record_ids))

    async def import_csv(self, csv: str | bytes, *, filename: str = "import.csv") -> CsvImportResult:
        """Create records from CSV: `{imported, failed: [{row, errors}]}`."""
        return await self._t.run(_records.import_csv(self.name, csv, filename=filename))

    async def export_csv(self, *, filter: str | None = None, sort: str | None = None,
                         search: str | None = None, locale: str | None = None) -> str:
        """The listable records as CSV text."""
        return await self._t.run(_records.export_csv(self.name, filter=filter, sort=sort, search=search,
                                                     locale=locale))


class AsyncBatch(_records.BatchBuilder):
    """`client.batch()`: add requests (`.collection(name).create(...)`, chainable), then `await send()` posts them
    as one all-or-nothing transaction."""

    def __init__(self, transport: AsyncTransport) -> None:
        super().__init__()
        self._t = transport

    async def send(self) -> list[BatchAnswer]:
        """One `{status, body}` per request; BatchError 400 when one fails (then nothing is stored)."""
        return await self._t.run(self.flow())


class AsyncCollections:
    """`client.collections`: the collection definitions (admins)."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def list(self) -> list[Collection]:
        """Every collection."""
        return await self._t.run(_resources.collections_list())

    async def create(self, definition: Mapping[str, Any]) -> Collection:
        """Create a collection (`{name, type?, schema, ...}`)."""
        return await self._t.run(_resources.collections_create(definition))

    async def delete(self, id_or_name: str) -> None:
        """Delete a collection and its records."""
        await self._t.run(_resources.collections_delete(id_or_name))


class AsyncFiles:
    """`client.files`: files attached to records."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def upload(self, collection: str, record_id: str, content: bytes, filename: str,
                     content_type: str = "application/octet-stream", *, field: str | None = None) -> File:
        """Attach `content` to a record (`field`: for that file field): the file's description (`id`, `size`, ...)."""
        return await self._t.run(_resources.files_upload(collection, record_id, content, filename, content_type,
                                                         field))

    async def token(self) -> FileToken:
        """A file token of the caller, `{token, expires}` (2 minutes): `?token=` on a protected field's file."""
        return await self._t.run(_resources.files_token())

    def url(self, file_id: str) -> str:
        """The absolute URL of a file's bytes (send credentials with it when its record is not public)."""
        return self._t.base_url + _resources.files_path(file_id)

    async def download(self, file_id: str) -> bytes:
        """A file's bytes, fetched with the client's credentials."""
        return await self._t.run(_resources.files_download(file_id))

    async def delete(self, file_id: str) -> None:
        """Delete a file."""
        await self._t.run(_resources.files_delete(file_id))


class AsyncApiKeys:
    """`client.api_keys`: API keys of admin-table users."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def create(self, name: str, scopes: Sequence[str] = ("read",), *,
                     expires_at: str | None = None) -> ApiKeyCreated:
        """Create a key (`scopes` of `read`, `write`; `expires_at` ISO 8601); its `key` is shown only here."""
        return await self._t.run(_resources.api_keys_create(name, scopes, expires_at))

    async def list(self) -> list[ApiKey]:
        """The caller's keys."""
        return await self._t.run(_resources.api_keys_list())

    async def delete(self, key_id: str) -> None:
        """Revoke a key."""
        await self._t.run(_resources.api_keys_delete(key_id))


class AsyncCmsClient:
    """The async client of one CMS service at `base_url` (for example `http://127.0.0.1:8090`).

    `auth_store` keeps the sign-in (a new `AuthStore` by default); `api_key` (`cms_...`) is sent as `X-API-Key`
    while nobody is signed in; `http` replaces the `httpx.AsyncClient` (the client then does not close it);
    `refresh_margin_s` (None: only on a 401) is how long before its expiry the access token is refreshed.
    Use `async with AsyncCmsClient(...) as client:` or call `aclose()`."""

    def __init__(self, base_url: str, *, auth_store: AuthStore | None = None, api_key: str | None = None,
                 http: httpx.AsyncClient | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 refresh_margin_s: float | None = DEFAULT_REFRESH_MARGIN_S) -> None:
        self._owns_http = http is None
        self.auth_store = auth_store if auth_store is not None else AuthStore()
        self._t = AsyncTransport(base_url, self.auth_store, api_key, http or httpx.AsyncClient(timeout=timeout_s),
                                 refresh_margin_s)
        self.base_url = self._t.base_url
        self.auth = AsyncAuth(self._t, ADMIN_AUTH_PATH)
        self.collections = AsyncCollections(self._t)
        self.files = AsyncFiles(self._t)
        self.api_keys = AsyncApiKeys(self._t)
        self.realtime = AsyncRealtime(self._t)

    def collection(self, name: str) -> AsyncCollection:
        """The records of collection `name` (and, for an auth collection, its user system as `.auth`)."""
        return AsyncCollection(self._t, name)

    def batch(self) -> AsyncBatch:
        """A new batch builder."""
        return AsyncBatch(self._t)

    async def refresh(self) -> Token:
        """Rotate the token pair of the signed-in user system now (the old refresh token is spent); concurrent
        refreshes share one request."""
        return await self._t.refresh_now()

    async def health(self) -> dict[str, Any]:
        """The service's health: `{status, mongodb, redis, version}`."""
        return await self._t.run(_resources.health())

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

