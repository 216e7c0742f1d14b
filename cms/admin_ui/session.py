"""The admin UI's sign-in state: the session cookie, CSRF tokens and the request's principal.

The cookie `cms_admin` holds the access and refresh tokens of an admin-table login
(`<access>~<refresh>`; `~` is not in a JWT). Every request authenticates the access token with
the API's `Authenticator` (a revoked session is refused at once, on every replica); an access
token that no longer authenticates is replaced through the same refresh service as
`POST /api/v1/auth/refresh`, and the new pair is written back to the cookie. Requests that present
the same spent refresh token at once (parallel htmx requests, two tabs, on any replica) share one
refresh through Redis (`_shared_refresh`), so the token is never spent twice.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import secrets
import time
from dataclasses import asdict, dataclass, field

import orjson
from aiohttp import web
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cms import redis_keys as keys
from cms.errors import Unauthorized
from cms.models import Principal, TokenPair
from cms.web.context import CALLER, is_https, services
from cms.wiring import Services

log = logging.getLogger("cms.admin_ui")

SESSION_COOKIE = "cms_admin"
LOGIN_CSRF_COOKIE = "cms_admin_login"
COOKIE_PATH = "/_/"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PRINCIPAL_KEY = "admin_ui.principal"
COOKIE_CHANGE_KEY = "admin_ui.cookie_change"
"""Request key: the TokenPair to write to the cookie, or None to clear it (set by sign-in, refresh, logout)."""
REFRESH_SHARE_S = 30
"""Seconds a refresh result is handed to other requests, on any replica, that present the same
refresh token (two tabs or parallel htmx requests at expiry would otherwise spend it twice, which
revokes the session)."""
REFRESH_LOCK_S = 10
"""Seconds one replica holds the right to refresh a given token (the refresh itself takes milliseconds)."""
REFRESH_WAIT_S = 5.0
"""Longest a request waits for another replica's refresh of the same token, in seconds."""
REFRESH_POLL_S = 0.05
"""How often a waiting request looks for that result, in seconds."""


@dataclass
class RefreshShare:
    """Refresh results of this process, keyed by a hash of the spent refresh token (the first
    place `_refreshed` looks; Redis is the second)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    results: dict[str, tuple[float, TokenPair]] = field(default_factory=dict)


REFRESH_SHARE = web.AppKey("admin_ui_refresh_share", RefreshShare)


def _hmac(request: web.Request, purpose: str, value: str) -> str:
    secret = services(request).config.secret_key.encode()
    return hmac.new(secret, f"cms-admin-ui:{purpose}:{value}".encode(), hashlib.sha256).hexdigest()


def csrf_token_for(request: web.Request, principal: Principal) -> str:
    """The CSRF token of a signed-in session: HMAC-SHA256 of its session id with SECRET_KEY (hex)."""
    return _hmac(request, "csrf", principal.session_id or "")


def csrf_token_matches(request: web.Request, principal: Principal, presented: str | None) -> bool:
    """Whether `presented` is the session's CSRF token (constant-time compare)."""
    return bool(presented) and hmac.compare_digest(str(presented), csrf_token_for(request, principal))


def login_csrf_token(request: web.Request, response: web.StreamResponse | None = None) -> str:
    """The pre-session CSRF token of the sign-in forms: HMAC of the nonce in the `cms_admin_login`
    cookie (double submit). When the request has no nonce, a new one is made and, with `response`,
    set on it."""
    nonce = request.get(LOGIN_CSRF_COOKIE) or request.cookies.get(LOGIN_CSRF_COOKIE, "")
    if len(nonce) < 16:
        nonce = secrets.token_urlsafe(24)
    request[LOGIN_CSRF_COOKIE] = nonce
    if response is not None and request.cookies.get(LOGIN_CSRF_COOKIE) != nonce:
        response.set_cookie(LOGIN_CSRF_COOKIE, nonce, path=COOKIE_PATH, httponly=True, samesite="Lax",
                            secure=is_https(request))
    return _hmac(request, "login", nonce)


def login_csrf_matches(request: web.Request, presented: str | None) -> bool:
    """Whether `presented` matches the nonce of the request's `cms_admin_login` cookie."""
    nonce = request.cookies.get(LOGIN_CSRF_COOKIE, "")
    return len(nonce) >= 16 and bool(presented) and hmac.compare_digest(
        str(presented), _hmac(request, "login", nonce))


def read_tokens(request: web.Request) -> tuple[str, str] | None:
    """(access token, refresh token) of the session cookie, or None."""
    access, sep, refresh = request.cookies.get(SESSION_COOKIE, "").partition("~")
    return (access, refresh) if sep and access and refresh else None


def access_token(request: web.Request) -> str | None:
    """The access token the request's principal was authenticated with (`current_principal`): the
    cookie's, or the new one when this request refreshed it; None without a session."""
    change = request.get(COOKIE_CHANGE_KEY)
    if isinstance(change, TokenPair):
        return change.access_token
    tokens = read_tokens(request)
    return None if tokens is None else tokens[0]


def write_cookie(request: web.Request, response: web.StreamResponse, pair: TokenPair | None) -> None:
    """Set the session cookie to `pair` (HttpOnly, SameSite=Lax, Secure over HTTPS), or clear it."""
    if pair is None:
        response.del_cookie(SESSION_COOKIE, path=COOKIE_PATH)
        return
    response.set_cookie(SESSION_COOKIE, f"{pair.access_token}~{pair.refresh_token}", path=COOKIE_PATH,
                        httponly=True, samesite="Lax", secure=is_https(request))


def apply_cookie_change(request: web.Request, response: web.StreamResponse) -> None:
    """Write what sign-in, refresh or logout decided for the cookie (on_response_prepare)."""
    if COOKIE_CHANGE_KEY in request:
        # aiohttp turns `response.cookies` into headers before this hook runs: add the header itself
        staged = web.StreamResponse()
        write_cookie(request, staged, request[COOKIE_CHANGE_KEY])
        for morsel in staged.cookies.values():
            response.headers.add("Set-Cookie", morsel.OutputString())


async def _refreshed(request: web.Request, refresh_token: str) -> TokenPair | None:
    """The new pair for a spent `refresh_token`, refreshed once for every request that presents it
    within REFRESH_SHARE_S, on any replica (see `_shared_refresh`); None when it is refused."""
    wired = services(request)
    share = request.app[REFRESH_SHARE]
    digest = hashlib.sha256(refresh_token.encode()).hexdigest()
    async with share.lock:
        now = time.monotonic()
        for stale in [k for k, (at, _) in share.results.items() if now - at > REFRESH_SHARE_S]:
            del share.results[stale]
        if digest in share.results:
            return share.results[digest][1]
        pair = await _shared_refresh(wired, refresh_token, digest)
        if pair is not None:
            share.results[digest] = (now, pair)
        return pair


async def _shared_refresh(services: Services, refresh_token: str, digest: str) -> TokenPair | None:
    """Refresh through the refresh service once across replicas: the replica that takes the Redis
    lock `<key>:lock` refreshes and leaves the new pair under `<key>` for REFRESH_SHARE_S, sealed
    with a key derived from the spent token (so only a holder of that token can open it); another
    replica waits for it (at most REFRESH_WAIT_S). Without Redis, this replica refreshes alone."""
    db = services.config.mongodb_db
    key, lock = keys.admin_ui_refresh(db, digest), keys.admin_ui_refresh_lock(db, digest)
    redis = services.redis
    try:
        sealed = await redis.get(key)
        if sealed is not None:
            return open_pair(refresh_token, sealed)
        leader = await redis.set(lock, b"1", nx=True, ex=REFRESH_LOCK_S)
    except Exception:  # fail open: a lone refresh is what happened before sharing
        log.warning("refresh sharing unavailable; refreshing without it", exc_info=True)
        return await _refresh(services, refresh_token)
    if leader:
        pair = await _refresh(services, refresh_token)
        try:
            if pair is None:
                await redis.delete(lock)  # refused: waiters stop waiting
            else:
                await redis.set(key, seal_pair(refresh_token, pair), ex=REFRESH_SHARE_S)
        except Exception:
            log.warning("refresh result not shared", exc_info=True)
        return pair
    deadline = time.monotonic() + REFRESH_WAIT_S
    while time.monotonic() < deadline:
        await asyncio.sleep(REFRESH_POLL_S)
        try:
            sealed = await redis.get(key)
            if sealed is not None:
                return open_pair(refresh_token, sealed)
            if not await redis.exists(lock):
                return None  # the other replica's refresh was refused
        except Exception:
            log.warning("refresh sharing unavailable while waiting", exc_info=True)
            return None
    return None


async def _refresh(services: Services, refresh_token: str) -> TokenPair | None:
    try:
        return await services.identity.login.refresh(services.identity.systems.admin, refresh_token)
    except Unauthorized:
        return None


def _sealing_key(refresh_token: str) -> bytes:
    return hashlib.sha256(b"cms-admin-ui-refresh-share:" + refresh_token.encode()).digest()


def seal_pair(refresh_token: str, pair: TokenPair) -> bytes:
    """`pair` as AES-256-GCM ciphertext under a key derived from `refresh_token` (nonce first, base64):
    what one replica leaves in Redis for the others after the refresh it made (`_shared_refresh`),
    which only a holder of the spent refresh token can open (`open_pair`)."""
    nonce = secrets.token_bytes(12)
    sealed = AESGCM(_sealing_key(refresh_token)).encrypt(nonce, orjson.dumps(asdict(pair)), None)
    return base64.b64encode(nonce + sealed)


def open_pair(refresh_token: str, sealed: bytes) -> TokenPair | None:
    """The pair `seal_pair` sealed, or None when it does not open with `refresh_token` or is
    malformed (never raises)."""
    try:
        raw = base64.b64decode(sealed, validate=True)
        return TokenPair(**orjson.loads(AESGCM(_sealing_key(refresh_token)).decrypt(raw[:12], raw[12:], None)))
    except (InvalidTag, ValueError, TypeError):
        return None


async def current_principal(request: web.Request) -> Principal | None:
    """The signed-in admin-table user of the request (any role), or None: no cookie, or tokens that
    neither authenticate nor refresh (logged out, revoked, expired). Cached on the request."""
    if PRINCIPAL_KEY in request:
        cached: Principal | None = request[PRINCIPAL_KEY]
        return cached
    principal = await _authenticate(request)
    request[PRINCIPAL_KEY] = request[CALLER] = principal
    return principal


async def _authenticate(request: web.Request) -> Principal | None:
    tokens = read_tokens(request)
    if tokens is None:
        return None
    authenticator = services(request).authenticator
    access, refresh = tokens
    try:
        principal = await authenticator.authenticate(access)
    except Unauthorized:
        pair = await _refreshed(request, refresh)
        if pair is None:
            request[COOKIE_CHANGE_KEY] = None
            return None
        try:
            principal = await authenticator.authenticate(pair.access_token)
        except Unauthorized:
            request[COOKIE_CHANGE_KEY] = None
            return None
        request[COOKIE_CHANGE_KEY] = pair
    if principal.kind != "admin_user":  # a collection user's token in our cookie: not ours
        request[COOKIE_CHANGE_KEY] = None
        return None
    return principal
