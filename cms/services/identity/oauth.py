"""OAuth2 / OpenID Connect login, for every user system (issue 14, item 2; decisions.md: Identity
and tokens, "Every login (password, OTP, OAuth2, 2FA completion) creates a session").

1. `providers` lists the configured providers (setting `oauth_providers`) with an authorization
   URL each, built with Authlib's `prepare_grant_uri`: PKCE S256 (the `code_verifier` goes to the
   client, which sends it back), an OIDC `nonce`, and a `state` signed by the service that binds
   the provider, the user system, the PKCE challenge and the nonce for STATE_LIFETIME_S.
2. The client sends the user to `auth_url`, the provider redirects back with `code` and `state`,
   and the client posts them with the `code_verifier` and `redirect_uri` to `callback`.
3. `callback` checks the state, exchanges the code at the token endpoint, and validates the ID
   token (signature against the provider's JWKS with `joserfc`, issuer, audience, expiry, nonce)
   or, for a provider without OIDC, reads the profile. The provider account (`provider`,
   `subject`) is linked to a user: an existing link wins; else, only when the provider says the
   address is verified, the user with that address (secured first if its own address was never
   verified: password, sessions, unspent emailed links and second factor are dropped) or a new verified user (no usable
   password until a reset). The login then completes as any other (a session, or `requires_2fa`).

Outgoing requests use the process's one HTTP session (in production mode it connects to public
addresses only: `webhook_sender.guarded_socket`), follow no redirects, time out after HTTP_TIMEOUT_S,
and have their answers capped at MAX_RESPONSE_BYTES. Discovery documents and key sets are cached for METADATA_TTL_S.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from cms.errors import AlreadyExists, BadRequest, Forbidden, TokenInvalid, ValidationFailed
from cms.models import LoginResult
from cms.security.json_input import JsonInputError, decode_json
from cms.security.oauth import STATE_LIFETIME_S, LoginState, ProviderConfig, read_state, sign_state
from cms.services.identity.credentials import new_password_hash
from cms.services.identity.deps import IdentityDeps
from cms.services.identity.login import Login
from cms.services.identity.mfa import TwoFactor
from cms.services.identity.systems import U, UserSystem
from cms.store.oauth_identities import OAuthIdentityRepository

log = logging.getLogger("cms.identity.oauth")

HTTP_TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 1024 * 1024
METADATA_TTL_S = 600.0
"""How long a discovery document or key set is reused (seconds)."""
FAILURE_TTL_S = 60.0
"""How long a failed fetch of one is remembered before it is tried again (seconds)."""
CLOCK_LEEWAY_S = 60
"""Allowed clock difference with the provider when checking an ID token's times (seconds)."""
ID_TOKEN_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")
VERIFIER_BYTES = 48
"""Random bytes of a PKCE code verifier (64 characters of base64url)."""


@dataclass(frozen=True)
class ProviderLink:
    """A provider as `oauth2/providers` lists it: where to send the user and what to send back."""

    name: str
    auth_url: str
    state: str
    code_verifier: str
    code_challenge: str
    code_challenge_method: str = "S256"


@dataclass(frozen=True)
class Endpoints:
    """A provider's endpoints, from its discovery document or its configuration."""

    auth_url: str
    token_url: str
    userinfo_url: str
    jwks_url: str
    issuer: str


@dataclass(frozen=True)
class ProviderAccount:
    """Who the provider says signed in."""

    subject: str
    email: str | None
    email_verified: bool
    name: str = ""


def _token() -> str:
    return secrets.token_urlsafe(VERIFIER_BYTES)


def s256(code_verifier: str) -> str:
    """The PKCE S256 challenge of `code_verifier` (RFC 7636, Authlib's)."""
    challenge: str = create_s256_code_challenge(code_verifier)  # type: ignore[no-untyped-call]
    return challenge


class OAuthLogin:
    """The provider list and the callback of OAuth2 login, for any user system; every method raises
    CmsError subclasses only."""

    def __init__(self, deps: IdentityDeps, login: Login, two_factor: TwoFactor, identities: OAuthIdentityRepository,
                 http: aiohttp.ClientSession, secret_key: str) -> None:
        self._deps = deps
        self._login = login
        self._two_factor = two_factor
        self._identities = identities
        self._http = http
        self._state_key = hashlib.sha256(b"cms-oauth-state\0" + secret_key.encode()).digest()
        self._metadata: dict[str, tuple[float, Any]] = {}

    async def providers(self, system: UserSystem[U], redirect_uri: str | None) -> list[ProviderLink]:
        """Every configured provider whose endpoints are known, with a fresh state and PKCE pair.
        Without `redirect_uri` the URL ends in `&redirect_uri=` for the client to complete.
        Raises Forbidden when the system's `oauth_enabled` is off."""
        await self._require_enabled(system)
        configs = await self._deps.settings.oauth_providers()
        found = await asyncio.gather(*(self._endpoints(config) for config in configs), return_exceptions=True)
        links = []
        for config, endpoints in zip(configs, found, strict=True):
            if isinstance(endpoints, BaseException):
                if not isinstance(endpoints, BadRequest):
                    raise endpoints
                log.warning("OAuth provider %s: endpoints unavailable; left out of the list", config.name)
                continue
            verifier = _token()
            challenge = s256(verifier)
            nonce = secrets.token_urlsafe(24)
            expires_at = int(self._deps.clock().timestamp()) + STATE_LIFETIME_S
            state = sign_state(LoginState(config.name, system.audience, challenge, nonce, expires_at), self._state_key)
            extra = {"nonce": nonce} if config.openid else {}
            url = prepare_grant_uri(endpoints.auth_url, config.client_id, "code", redirect_uri=redirect_uri,
                                    scope=" ".join(config.scopes), state=state, code_challenge=challenge,
                                    code_challenge_method="S256", **extra)
            links.append(ProviderLink(config.name, url if redirect_uri else f"{url}&redirect_uri=", state,
                                      verifier, challenge))
        return links

    async def callback(self, system: UserSystem[U], provider: str, code: str, code_verifier: str, state: str,
                       redirect_uri: str, *, ip: str = "", user_agent: str = "") -> LoginResult:
        """Complete an OAuth2 login (see the module). Raises Forbidden (`oauth_enabled` off),
        ValidationFailed (unknown provider), TokenInvalid (a state that is forged, expired, of another
        provider or system or PKCE pair; an ID token that fails validation), BadRequest (the
        provider refused the code, could not be reached, or gave no email address) or AlreadyExists
        (an account has this address, which the provider did not verify)."""
        await self._require_enabled(system)
        config = next((p for p in await self._deps.settings.oauth_providers() if p.name == provider), None)
        if config is None:
            raise ValidationFailed("Unknown provider", errors={"provider": ["No such OAuth2 provider."]})
        login_state = read_state(state, self._state_key, int(self._deps.clock().timestamp()))
        if (login_state is None or login_state.provider != provider or login_state.audience != system.audience
                or s256(code_verifier) != login_state.code_challenge):
            raise TokenInvalid("The OAuth2 state is invalid, expired or not of this login")
        endpoints = await self._endpoints(config)
        tokens = await self._exchange(config, endpoints, code, code_verifier, redirect_uri)
        account = await self._account(config, endpoints, tokens, login_state.nonce)
        user = await self._user(system, config.name, account)
        return await self._login.signed_in(system, user, method="oauth2", ip=ip, user_agent=user_agent)

    async def forget_audience(self, audience: str) -> int:
        """Drop every provider link of a deleted user system (`UserSystems.on_forgotten`)."""
        return await self._identities.delete_audience(audience)

    # --- steps ----------------------------------------------------------------------------------

    @staticmethod
    async def _require_enabled(system: UserSystem[U]) -> None:
        if not await system.oauth_enabled():
            raise Forbidden("OAuth2 login is disabled")

    async def _endpoints(self, config: ProviderConfig) -> Endpoints:
        if not config.discovery_url:
            return Endpoints(config.auth_url, config.token_url, config.userinfo_url, config.jwks_url, config.issuer)
        document = await self._cached_json(config.discovery_url)
        if not isinstance(document, dict):
            raise BadRequest(f"The discovery document of provider '{config.name}' is not valid")

        def pick(key: str, configured: str) -> str:
            value = configured or document.get(key, "")
            return value if isinstance(value, str) else ""

        endpoints = Endpoints(pick("authorization_endpoint", config.auth_url), pick("token_endpoint", config.token_url),
                              pick("userinfo_endpoint", config.userinfo_url), pick("jwks_uri", config.jwks_url),
                              pick("issuer", config.issuer))
        if not endpoints.auth_url or not endpoints.token_url:
            raise BadRequest(f"The discovery document of provider '{config.name}' lacks its endpoints")
        return endpoints

    async def _exchange(self, config: ProviderConfig, endpoints: Endpoints, code: str, code_verifier: str,
                        redirect_uri: str) -> dict[str, Any]:
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "client_id": config.client_id, "client_secret": config.client_secret, "code_verifier": code_verifier}
        status, body = await self._request("POST", endpoints.token_url, data=form)
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("access_token"), str):
            reason = body.get("error", "") if isinstance(body, dict) else ""
            raise BadRequest(f"The provider refused the authorization code{f' ({reason})' if reason else ''}")
        return body

    async def _account(self, config: ProviderConfig, endpoints: Endpoints, tokens: dict[str, Any],
                       nonce: str) -> ProviderAccount:
        id_token = tokens.get("id_token")
        if config.openid and isinstance(id_token, str) and endpoints.jwks_url:
            claims = await self._id_token_claims(config, endpoints, id_token, nonce)
            return ProviderAccount(str(claims["sub"]), _email(claims.get("email")),
                                   claims.get("email_verified") is True, str(claims.get("name", "")))
        if not endpoints.userinfo_url:
            raise BadRequest(f"Provider '{config.name}' gave neither an ID token nor a profile")
        auth = {"Authorization": f"Bearer {tokens['access_token']}"}
        status, profile = await self._request("GET", endpoints.userinfo_url, headers=auth)
        if status != 200 or not isinstance(profile, dict) or not (profile.get("sub") or profile.get("id")):
            raise BadRequest(f"Provider '{config.name}' did not give the profile")
        email, verified = _email(profile.get("email")), profile.get("email_verified") is True
        if config.emails_url:  # GitHub: the verified primary address comes from its own list
            status, listed = await self._request("GET", config.emails_url, headers=auth)
            entries = listed if isinstance(listed, list) else []
            primary = [e for e in entries if isinstance(e, dict) and e.get("primary")]
            if status == 200 and primary:
                email, verified = _email(primary[0].get("email")), primary[0].get("verified") is True
        return ProviderAccount(str(profile.get("sub") or profile.get("id")), email, verified,
                               str(profile.get("name") or ""))

    async def _id_token_claims(self, config: ProviderConfig, endpoints: Endpoints, id_token: str,
                               nonce: str) -> dict[str, Any]:
        try:
            try:
                keys = await self._cached_json(endpoints.jwks_url)
                token = jwt.decode(id_token, KeySet.import_key_set(keys), algorithms=list(ID_TOKEN_ALGORITHMS))
            except JoseError:  # the provider may have rotated its keys since they were cached: fetch once more
                self._metadata.pop(endpoints.jwks_url, None)
                keys = await self._cached_json(endpoints.jwks_url)
                token = jwt.decode(id_token, KeySet.import_key_set(keys), algorithms=list(ID_TOKEN_ALGORITHMS))
            claims = dict(token.claims)
            issuer = endpoints.issuer.replace("{tenantid}", str(claims.get("tid", "")))  # Microsoft's common issuer
            registry = jwt.JWTClaimsRegistry(
                now=int(self._deps.clock().timestamp()), leeway=CLOCK_LEEWAY_S,
                iss={"essential": True, "value": issuer}, aud={"essential": True, "value": config.client_id},
                sub={"essential": True}, exp={"essential": True})
            registry.validate(claims)
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            raise TokenInvalid(f"The provider's ID token is not valid ({type(exc).__name__})") from exc
        if not secrets.compare_digest(str(claims.get("nonce", "")), nonce):
            raise TokenInvalid("The provider's ID token is not of this login (nonce)")
        return claims

    async def _user(self, system: UserSystem[U], provider: str, account: ProviderAccount) -> U:
        """The user the provider account signs in as: linked before, or the user with the same
        address (only if the provider verified it), or a new user (likewise). An existing user whose
        own address was never verified is secured before it is linked: whoever registered it
        without proving the mailbox loses its password, sessions, unspent emailed links (an email change
        to its own address) and second factor (pre-hijacking)."""
        linked = await self._identities.user_of(system.audience, provider, account.subject)
        if linked is not None:
            user = await system.get(linked)
            if user is not None:
                return user
            await self._identities.unlink(system.audience, provider, account.subject)  # the user was deleted
        if not account.email:
            raise BadRequest("The provider gave no email address")
        existing = await system.find_by_email(account.email)
        if not account.email_verified:
            if existing is not None:
                raise AlreadyExists("An account with this email exists; the provider did not verify the address, "
                                    "so it is not linked")
            raise BadRequest("The provider did not verify the email address, so no account is created for it")
        if existing is not None and not existing.verified:
            await system.set_password_hash(existing.id, await new_password_hash(_token()))
            await self._deps.sessions.revoke_all(existing.id, system.audience)
            await self._deps.one_time_tokens.void_all(existing.id)  # e.g. the squatter's pending email change
            await self._two_factor.forget(system, existing.id)
            existing = await system.set_verified(existing)
        user = existing or await system.create(account.email, _token(), {"name": account.name} if system.collection_name
                                               is None else {}, verified=True)
        await self._identities.link(system.audience, provider, account.subject, user.id, account.email,
                                    self._deps.clock())
        return user

    # --- HTTP -----------------------------------------------------------------------------------

    async def _cached_json(self, url: str) -> Any:
        """The JSON at `url`, reused for METADATA_TTL_S; a failure is remembered for FAILURE_TTL_S,
        so a provider that is down does not cost every request a time-out. Raises BadRequest."""
        cached = self._metadata.get(url)
        if cached is not None and time.monotonic() < cached[0]:
            if isinstance(cached[1], BadRequest):
                raise cached[1]
            return cached[1]
        try:
            status, body = await self._request("GET", url)
            if status != 200:
                raise BadRequest(f"The provider answered {status} at {url}")
        except BadRequest as exc:
            self._metadata[url] = (time.monotonic() + FAILURE_TTL_S, exc)
            raise
        self._metadata[url] = (time.monotonic() + METADATA_TTL_S, body)
        return body

    async def _request(self, method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
        """(status, JSON body or None) of one request. Raises BadRequest when the provider cannot be reached."""
        headers = {"Accept": "application/json", **kwargs.pop("headers", {})}
        try:
            async with self._http.request(method, url, headers=headers, allow_redirects=False,
                                          timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S), **kwargs) as response:
                raw = await response.content.read(MAX_RESPONSE_BYTES + 1)
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BadRequest("The OAuth2 provider could not be reached") from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            raise BadRequest("The OAuth2 provider's answer is too large")
        try:  # bounded: a provider's answer is input too (depth, huge integers)
            return status, decode_json(raw) if raw else None
        except JsonInputError:
            return status, None


def _email(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and "@" in value and len(value) <= 254 else None
