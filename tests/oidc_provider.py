"""A real OpenID Connect provider for tests, served by aiohttp on 127.0.0.1 (STYLE rule 13).

It implements the authorization code flow with PKCE (RFC 6749 4.1, RFC 7636 S256 only,
OpenID Connect Core 1.0 3.1) for one confidential client:

- `GET /.well-known/openid-configuration`: the discovery document (OpenID Connect Discovery 1.0).
- `GET|POST /authorize`: "consents" at once for `provider.user` and answers 302 to
  `redirect_uri?code=...&state=...`. A missing or wrong `client_id` or `redirect_uri` is a
  400 JSON error (RFC 6749 4.1.2.1: never redirect to an unchecked URI); every other invalid
  request is a 302 to `redirect_uri?error=...&error_description=...&state=...`.
- `POST /token`: `grant_type=authorization_code` with client_secret_post or client_secret_basic
  and a `code_verifier`; errors are RFC 6749 5.2 JSON (`invalid_client` is 401, the rest 400).
- `GET /jwks`: the RSA signing key (RS256, with `kid`) as a JWK set.
- `GET|POST /userinfo` with `Authorization: Bearer <access_token>`.

Codes are single use (a replayed code is refused and revokes the access tokens issued from it,
RFC 6749 4.1.2) and expire after `CODE_TTL_S`. Time comes from the injected clock, so a
test's `MovableClock` moves the provider too. JOSE work is done by joserfc (the JOSE library
that Authlib itself now uses; `authlib.jose` is deprecated) and the PKCE transform by Authlib.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from urllib.parse import unquote_plus

import aiohttp
from aiohttp import web
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.jwk import RSAKey
from multidict import MultiDict
from yarl import URL

from cms.clock import utcnow

CODE_TTL_S = 60
ID_TOKEN_TTL_S = 300
ACCESS_TOKEN_TTL_S = 3600
SCOPES_SUPPORTED = ["openid", "email", "profile"]
#: RFC 7636 4.1: code_verifier = 43*128unreserved; an S256 challenge has the same alphabet.
_PKCE_VALUE = re.compile(r"[A-Za-z0-9\-._~]{43,128}")
_HTTP_TIMEOUT = aiohttp.ClientTimeout(total=10)


@dataclass
class ProviderUser:
    """The account that "logs in" at the provider.

    `email=None` leaves `email` and `email_verified` out of the ID token and userinfo, and an
    empty `name` leaves `name` out, as a provider does for claims it does not have."""

    sub: str
    email: str | None
    email_verified: bool = True
    name: str = ""

    def claims(self) -> dict[str, Any]:
        """The user's standard claims (OpenID Connect Core 5.1): sub, email, email_verified, name."""
        claims: dict[str, Any] = {"sub": self.sub}
        if self.email is not None:
            claims["email"] = self.email
            claims["email_verified"] = self.email_verified
        if self.name:
            claims["name"] = self.name
        return claims


class AuthorizeFailed(AssertionError):
    """`OidcProvider.authorize` did not end in a redirect carrying a code.

    `error` is the RFC 6749 error code (from the redirect or the 400 body) or "" when the
    answer was not an OAuth error at all; `status` is the HTTP status of the answer."""

    def __init__(self, message: str, *, status: int, error: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.error = error


class _OAuthError(Exception):
    """An RFC 6749 error answer: `error` code, human-readable description, HTTP status."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.status = status


@dataclass
class _Code:
    """What an authorization code remembers until it is redeemed."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    nonce: str | None
    scope: str
    user: ProviderUser
    expires_at: float
    used: bool = False
    access_tokens: list[str] = field(default_factory=list)


@dataclass
class _AccessToken:
    """An issued access token: whose it is, for which scope, until when (epoch seconds)."""

    user: ProviderUser
    scope: str
    expires_at: float


class OidcProvider:
    """A minimal, standards-following OpenID Connect provider (authorization code flow with PKCE S256)
    served by aiohttp on 127.0.0.1.

    Build it with `running_provider()`. Tests set `user` (who logs in at the next /authorize)
    and `id_token_overrides` (claims replaced in the ID tokens issued from then on; a value of
    None removes the claim), and read `token_requests` (every form body /token received)."""

    def __init__(self, *, client_id: str, client_secret: str, signing_key: RSAKey,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.issuer = ""  # set by running_provider once the port is known
        self.client_id = client_id
        self.client_secret = client_secret
        self.user = ProviderUser(sub="provider-subject-1", email="oidc.person@example.com", name="OIDC Person")
        self.id_token_overrides: dict[str, Any] = {}
        self.token_requests: list[dict[str, str]] = []
        self._signing_key = signing_key
        self._clock = clock
        self._codes: dict[str, _Code] = {}
        self._access_tokens: dict[str, _AccessToken] = {}
        self.session: aiohttp.ClientSession | None = None
        """The HTTP session `authorize` acts as the browser with; set by `running_provider` while it runs."""

    # --- URLs ----------------------------------------------------------------------------------

    @property
    def discovery_url(self) -> str:
        """The OpenID Connect discovery document's URL."""
        return f"{self.issuer}/.well-known/openid-configuration"

    @property
    def authorization_endpoint(self) -> str:
        """The authorization endpoint's URL."""
        return f"{self.issuer}/authorize"

    @property
    def token_endpoint(self) -> str:
        """The token endpoint's URL."""
        return f"{self.issuer}/token"

    @property
    def userinfo_endpoint(self) -> str:
        """The userinfo endpoint's URL."""
        return f"{self.issuer}/userinfo"

    @property
    def jwks_uri(self) -> str:
        """The JWK set's URL."""
        return f"{self.issuer}/jwks"

    def jwks(self) -> dict[str, Any]:
        """The public signing key as a JWK set: `{"keys": [{kty, n, e, kid, use, alg}]}`."""
        return {"keys": [self._signing_key.as_dict(private=False)]}

    # --- the browser side ----------------------------------------------------------------------

    async def authorize(self, auth_url: str) -> tuple[str, str]:
        """Act as the browser: GET `auth_url` without following redirects and return `(code, state)`.

        `auth_url` must point at this provider's authorization endpoint, and the answer must be
        a 302 to the `redirect_uri` given in it. Raises AuthorizeFailed otherwise, including when
        the redirect carries `error=` (its `error` attribute holds the RFC 6749 code)."""
        url = URL(auth_url)
        if url.with_query(None).with_fragment(None) != URL(self.authorization_endpoint):
            raise AuthorizeFailed(f"{auth_url} is not {self.authorization_endpoint}", status=0)
        assert self.session is not None, "the provider is not running"
        async with self.session.get(url, allow_redirects=False) as response:
            location = response.headers.get("Location")
            if response.status != 302 or location is None:
                body = await response.text()
                error = ""
                if response.content_type == "application/json":
                    error = str((await response.json()).get("error", ""))
                raise AuthorizeFailed(f"authorize answered {response.status}: {body}",
                                      status=response.status, error=error)
        target = URL(location)
        redirect_uri = url.query.get("redirect_uri", "")
        if target.with_query(None).with_fragment(None) != URL(redirect_uri).with_query(None).with_fragment(None):
            raise AuthorizeFailed(f"redirected to {location}, not to {redirect_uri}", status=302)
        if "error" in target.query:
            raise AuthorizeFailed(f"authorize refused: {target.query['error']}: "
                                  f"{target.query.get('error_description', '')}",
                                  status=302, error=target.query["error"])
        return target.query["code"], target.query.get("state", "")

    # --- the aiohttp app -----------------------------------------------------------------------

    def app(self) -> web.Application:
        """The provider's aiohttp application (routes only; `running_provider` serves it)."""
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_route("GET", "/authorize", self._authorize)
        app.router.add_route("POST", "/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_route("GET", "/userinfo", self._userinfo)
        app.router.add_route("POST", "/userinfo", self._userinfo)
        return app

    def _now(self) -> float:
        return self._clock().timestamp()

    async def _discovery(self, request: web.Request) -> web.Response:
        return web.json_response({
            "issuer": self.issuer,
            "authorization_endpoint": self.authorization_endpoint,
            "token_endpoint": self.token_endpoint,
            "userinfo_endpoint": self.userinfo_endpoint,
            "jwks_uri": self.jwks_uri,
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": SCOPES_SUPPORTED,
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
            "claims_supported": ["iss", "sub", "aud", "iat", "exp", "nonce", "at_hash",
                                 "email", "email_verified", "name"],
        })

    async def _jwks(self, request: web.Request) -> web.Response:
        return web.json_response(self.jwks())

    # --- /authorize ----------------------------------------------------------------------------

    async def _authorize(self, request: web.Request) -> web.Response:
        raw = await request.post() if request.method == "POST" else request.query
        params = MultiDict((key, value) for key, value in raw.items() if isinstance(value, str))
        # RFC 6749 3.1: no parameter may be included more than once.
        repeated = sorted({key for key in params if len(params.getall(key)) > 1})
        client_id = params.get("client_id", "")
        redirect_uri = params.get("redirect_uri", "")
        if "client_id" in repeated or not hmac.compare_digest(client_id.encode(), self.client_id.encode()):
            return _error_json(_OAuthError("invalid_request", "unknown or missing client_id"))
        if "redirect_uri" in repeated or not _is_http_url(redirect_uri):
            return _error_json(_OAuthError("invalid_request", "redirect_uri must be an absolute http(s) URL"))
        state = params.get("state", "")
        try:
            if repeated:
                raise _OAuthError("invalid_request", f"repeated parameters: {', '.join(repeated)}")
            code = self._new_code(params, client_id=client_id, redirect_uri=redirect_uri)
        except _OAuthError as exc:
            query = {"error": exc.error, "error_description": exc.description}
            if state:
                query["state"] = state
            raise web.HTTPFound(URL(redirect_uri).update_query(query)) from None
        raise web.HTTPFound(URL(redirect_uri).update_query({"code": code, "state": state}))

    def _new_code(self, params: Mapping[str, str], *, client_id: str, redirect_uri: str) -> str:
        """Check an authorization request's other parameters and issue a code for `self.user`."""
        if params.get("response_type", "") != "code":
            raise _OAuthError("unsupported_response_type", "only response_type=code is supported")
        scope = params.get("scope", "")
        if "openid" not in scope.split():
            raise _OAuthError("invalid_scope", "scope must contain openid")
        if not params.get("state"):
            raise _OAuthError("invalid_request", "state is required")
        code_challenge = params.get("code_challenge", "")
        if not code_challenge:
            raise _OAuthError("invalid_request", "code_challenge is required (PKCE)")
        if params.get("code_challenge_method", "plain") != "S256":
            raise _OAuthError("invalid_request", "transform algorithm not supported: use S256")
        if not _PKCE_VALUE.fullmatch(code_challenge):
            raise _OAuthError("invalid_request", "malformed code_challenge")
        code = secrets.token_urlsafe(32)
        self._codes[code] = _Code(client_id=client_id, redirect_uri=redirect_uri, code_challenge=code_challenge,
                                  nonce=params.get("nonce") or None, scope=scope, user=replace(self.user),
                                  expires_at=self._now() + CODE_TTL_S)
        return code

    # --- /token --------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        try:
            if request.content_type != "application/x-www-form-urlencoded":
                raise _OAuthError("invalid_request", "the body must be application/x-www-form-urlencoded")
            post = await request.post()
            form = {key: value for key, value in post.items() if isinstance(value, str)}
            self.token_requests.append(form)
            self._authenticate_client(request, form)
            if form.get("grant_type") != "authorization_code":
                raise _OAuthError("unsupported_grant_type", "only authorization_code is supported")
            body = self._redeem_code(form)
        except _OAuthError as exc:
            response = _error_json(exc)
            if exc.status == 401:
                response.headers["WWW-Authenticate"] = 'Basic realm="oidc-provider"'
            return response
        return web.json_response(body, headers={"Cache-Control": "no-store", "Pragma": "no-cache"})

    def _authenticate_client(self, request: web.Request, form: Mapping[str, str]) -> None:
        """Check client_secret_basic or client_secret_post (exactly one of them, RFC 6749 2.3)."""
        header = request.headers.get("Authorization", "")
        in_body = "client_secret" in form
        if header:
            if in_body:
                raise _OAuthError("invalid_request", "use one client authentication method, not two")
            scheme, _, encoded = header.partition(" ")
            if scheme.lower() != "basic":
                raise _OAuthError("invalid_client", "unsupported authentication scheme", 401)
            try:
                decoded = base64.b64decode(encoded, validate=True).decode()
            except ValueError:
                raise _OAuthError("invalid_client", "malformed Basic credentials", 401) from None
            raw_id, _, raw_secret = decoded.partition(":")
            # RFC 6749 2.3.1: both parts are form-urlencoded before base64.
            client_id, client_secret = unquote_plus(raw_id), unquote_plus(raw_secret)
            if form.get("client_id", client_id) != client_id:
                raise _OAuthError("invalid_request", "client_id in the body differs from the Basic credentials")
        elif in_body:
            client_id, client_secret = form.get("client_id", ""), form["client_secret"]
        else:
            raise _OAuthError("invalid_client", "client authentication is required", 401)
        if not (hmac.compare_digest(client_id.encode(), self.client_id.encode())
                and hmac.compare_digest(client_secret.encode(), self.client_secret.encode())):
            raise _OAuthError("invalid_client", "client authentication failed", 401)

    def _redeem_code(self, form: Mapping[str, str]) -> dict[str, Any]:
        """Spend the code of an authenticated token request; return the token response body."""
        code = self._codes.get(form.get("code", ""))
        if code is None:
            raise _OAuthError("invalid_grant", "unknown authorization code")
        if code.used:
            for access_token in code.access_tokens:
                self._access_tokens.pop(access_token, None)
            raise _OAuthError("invalid_grant", "authorization code already used")
        code.used = True
        now = self._now()
        if now >= code.expires_at:
            raise _OAuthError("invalid_grant", "authorization code expired")
        if code.client_id != self.client_id:
            raise _OAuthError("invalid_grant", "authorization code was issued to another client")
        if form.get("redirect_uri", "") != code.redirect_uri:
            raise _OAuthError("invalid_grant", "redirect_uri does not match the authorization request")
        code_verifier = form.get("code_verifier", "")
        if not _PKCE_VALUE.fullmatch(code_verifier):
            raise _OAuthError("invalid_grant", "missing or malformed code_verifier")
        challenge: str = create_s256_code_challenge(code_verifier)
        if not hmac.compare_digest(challenge.encode(), code.code_challenge.encode()):
            raise _OAuthError("invalid_grant", "code_verifier does not match the code_challenge")
        access_token = secrets.token_urlsafe(32)
        self._access_tokens[access_token] = _AccessToken(user=code.user, scope=code.scope,
                                                         expires_at=now + ACCESS_TOKEN_TTL_S)
        code.access_tokens.append(access_token)
        return {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": ACCESS_TOKEN_TTL_S,
            "id_token": self._id_token(code, access_token, now),
            "scope": code.scope,
        }

    def _id_token(self, code: _Code, access_token: str, now: float) -> str:
        """Sign the ID token (RS256, header `kid`) for a redeemed code, with `id_token_overrides` applied."""
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.client_id,
            "iat": int(now),
            "exp": int(now) + ID_TOKEN_TTL_S,
            "at_hash": _half_hash(access_token),
            **code.user.claims(),
        }
        if code.nonce is not None:
            claims["nonce"] = code.nonce
        for name, value in self.id_token_overrides.items():
            if value is None:
                claims.pop(name, None)
            else:
                claims[name] = value
        header = {"alg": "RS256", "typ": "JWT", "kid": self._signing_key.kid}
        return jwt.encode(header, claims, self._signing_key, algorithms=["RS256"])

    # --- /userinfo -----------------------------------------------------------------------------

    async def _userinfo(self, request: web.Request) -> web.Response:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        token = self._access_tokens.get(value) if scheme.lower() == "bearer" else None
        if token is None or self._now() >= token.expires_at:
            return web.json_response({"error": "invalid_token", "error_description": "unknown or expired token"},
                                     status=401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        return web.json_response(token.user.claims())


def _error_json(exc: _OAuthError) -> web.Response:
    """An RFC 6749 5.2 error body: `{"error", "error_description"}` with the error's status."""
    return web.json_response({"error": exc.error, "error_description": exc.description}, status=exc.status,
                             headers={"Cache-Control": "no-store", "Pragma": "no-cache"})


def _is_http_url(value: str) -> bool:
    """Whether `value` is an absolute http(s) URL without a fragment (RFC 6749 3.1.2)."""
    try:
        url = URL(value)
    except ValueError:
        return False
    return url.is_absolute() and url.scheme in ("http", "https") and bool(url.host) and not url.fragment


def _half_hash(value: str) -> str:
    """OpenID Connect Core 3.1.3.6 `at_hash` for RS256: base64url of the left half of SHA-256."""
    digest = hashlib.sha256(value.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode("ascii")


@asynccontextmanager
async def running_provider(*, client_id: str = "cms-test-client", client_secret: str = "cms-test-secret",
                           clock: Callable[[], datetime] = utcnow) -> AsyncIterator[OidcProvider]:
    """Start an OidcProvider on a free loopback port with a fresh RSA key; stop it on exit.

    `clock` (a `cms.clock.Clock`, e.g. the tests' `MovableClock`) dates codes, tokens and
    the ID token's `iat`/`exp`."""
    signing_key = RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(8), "use": "sig", "alg": "RS256"})
    provider = OidcProvider(client_id=client_id, client_secret=client_secret, signing_key=signing_key, clock=clock)
    runner = web.AppRunner(provider.app(), access_log=None)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        provider.issuer = f"http://127.0.0.1:{sock.getsockname()[1]}"
        await runner.setup()
        try:
            await web.SockSite(runner, sock).start()
            async with aiohttp.ClientSession(timeout=_HTTP_TIMEOUT) as session:
                provider.session = session
                try:
                    yield provider
                finally:
                    provider.session = None
        finally:
            await runner.cleanup()
