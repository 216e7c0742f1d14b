"""How users and what surrounds them become JSON (decisions.md, Response shapes; Identity and
tokens; Two-factor login): the two user systems' users, the login and register answers, token
pairs, sessions, two-factor setup, OAuth2 provider links and API keys."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marshmallow import INCLUDE, fields

from cms.models import AdminUser, ApiKey, CollectionUser, LoginResult, Session, TokenPair
from cms.services.representation.base import Rendered, Representation, Timestamp, dump_many, dump_one
from cms.services.representation.records import record_json

if TYPE_CHECKING:  # the services import this package (records): only their types here
    from cms.services.identity.mfa import TotpSetup
    from cms.services.identity.oauth import ProviderLink

# --- users and the answers around them -------------------------------------------------------


class AdminUserSchema(Representation):
    """An admin-table user; never its password hash."""

    id = fields.String()
    email = fields.String()
    role = fields.String()
    verified = fields.Boolean()
    name = fields.String()
    created = Timestamp()
    updated = Timestamp()


class CollectionUserSchema(Representation):
    """A user of an auth collection: its record (flat, with the schema fields), never a password."""

    class Meta:
        """marshmallow options."""

        unknown = INCLUDE  # documents additionalProperties: the collection's fields sit beside these

    id = fields.String()
    email = fields.String()
    verified = fields.Boolean()
    created = fields.String()
    updated = fields.String()


class PendingUserSchema(Representation):
    """The user of a login that waits for its second factor: only who it is."""

    id = fields.String()
    email = fields.String()


class TokenSchema(Representation):
    """A token pair: `{access_token, refresh_token, token_type: "bearer", expires_in}` (seconds)."""

    access_token = fields.String()
    refresh_token = fields.String()
    token_type = fields.String()
    expires_in = fields.Integer(metadata={"description": "Access-token lifetime in seconds"})


class _LoginAnswer(Representation):
    """What every login response carries besides its user system's `user`."""

    class Meta:
        optional = ("mfa_token",)

    token = fields.Nested(TokenSchema, allow_none=True)
    message = fields.String(allow_none=True)
    requires_2fa = fields.Boolean()
    mfa_token = fields.String(metadata={"description": "With requires_2fa only: what 2fa/verify takes (5 minutes, "
                                                       "single use); `user` is then only {id, email}"})


class LoginResponseSchema(_LoginAnswer):
    """The admin table's login answer."""

    user = Rendered(AdminUserSchema, PendingUserSchema)


class CollectionLoginResponseSchema(_LoginAnswer):
    """An auth collection's login answer."""

    user = Rendered(CollectionUserSchema, PendingUserSchema)


class RegisterResponseSchema(Representation):
    """The admin table's register answer: `{user, message}`."""

    user = Rendered(AdminUserSchema)
    message = fields.String()


class CollectionRegisterResponseSchema(Representation):
    """An auth collection's register answer: `{user, message}`."""

    user = Rendered(CollectionUserSchema)
    message = fields.String()


_ADMIN_USER = AdminUserSchema()
_PENDING_USER = PendingUserSchema()
_TOKEN = TokenSchema()


def admin_user(user: AdminUser) -> dict[str, Any]:
    """An admin-table user: `{id, email, role, verified, name, created, updated}`."""
    return dump_one(_ADMIN_USER, user)


def collection_user(user: CollectionUser) -> dict[str, Any]:
    """A collection user: its record `{id, created, updated, email, verified, ...fields}` (no password)."""
    return record_json(user.record)


def token(pair: TokenPair) -> dict[str, Any]:
    """A token pair: `{access_token, refresh_token, token_type, expires_in}` (seconds)."""
    return dump_one(_TOKEN, pair)


@dataclass(frozen=True)
class UserShape:
    """How one user system shows its users: `user(u)` renders one; `login` and `registered` the
    answers around it, dumped by that system's response schemas."""

    user: Callable[[Any], dict[str, Any]]
    login_schema: _LoginAnswer
    registered_schema: Representation

    def login(self, result: LoginResult) -> dict[str, Any]:
        """The login answer `{user, token, message, requires_2fa}`; with `requires_2fa`, `user` is
        only `{id, email}`, `token` null, and `mfa_token` is added (decisions.md, Two-factor login)."""
        if result.requires_2fa:
            return dump_one(self.login_schema, {
                "user": dump_one(_PENDING_USER, result.user), "token": None, "message": result.message,
                "requires_2fa": True, "mfa_token": result.mfa_token})
        return dump_one(self.login_schema, {"user": self.user(result.user), "token": result.token,
                                            "message": result.message, "requires_2fa": False})

    def registered(self, user: Any, message: str) -> dict[str, Any]:
        """The register answer `{user, message}`."""
        return dump_one(self.registered_schema, {"user": self.user(user), "message": message})


ADMIN_USERS = UserShape(admin_user, LoginResponseSchema(), RegisterResponseSchema())
COLLECTION_USERS = UserShape(collection_user, CollectionLoginResponseSchema(), CollectionRegisterResponseSchema())


# --- sessions and second factors -------------------------------------------------------------


class SessionSchema(Representation):
    """Dumps `(session, current)`: `current` is whether it is the session making the request."""

    id = fields.String()
    created = Timestamp()
    last_used = Timestamp()
    user_agent = fields.String()
    ip = fields.String()
    current = fields.Boolean(metadata={"description": "True for the session of the token making the request"})

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        """`current` from the pair's flag, the rest from the session."""
        session, current = obj
        return current if attr == "current" else super().get_attribute(session, attr, default)


class TwoFactorSetupSchema(Representation):
    """A pending two-factor setup: `{secret, otpauth_url, qr_svg}`."""

    secret = fields.String(metadata={"description": "Base32 TOTP secret (RFC 6238, 30 s, 6 digits, SHA-1)"})
    otpauth_url = fields.String()
    qr_svg = fields.String(metadata={"description": "The otpauth URL as a QR code, SVG text"})


class RecoveryCodesSchema(Representation):
    """The recovery codes of a two-factor enable: `{recovery_codes}`."""

    recovery_codes = fields.List(fields.String(), metadata={"description": "Shown once; each works once"})


class OAuthProviderSchema(Representation):
    """One OAuth2 provider link with its fresh state and PKCE pair."""

    name = fields.String()
    auth_url = fields.String(metadata={"description": "Send the user here (PKCE S256, state and nonce included)"})
    state = fields.String(metadata={"description": "Compare with the state the provider sends back; post it to "
                                                   "oauth2/callback (valid 10 minutes)"})
    code_verifier = fields.String(metadata={"description": "Keep it; post it to oauth2/callback"})
    code_challenge = fields.String()
    code_challenge_method = fields.String()


_SESSION = SessionSchema()
_TWO_FACTOR_SETUP = TwoFactorSetupSchema()
_RECOVERY_CODES = RecoveryCodesSchema()
_OAUTH_PROVIDER = OAuthProviderSchema()


def sessions(items: Sequence[Session], current_session_id: str | None) -> list[dict[str, Any]]:
    """Sessions as `[{id, created, last_used, user_agent, ip, current}]`, in the given order."""
    return dump_many(_SESSION, ((s, s.id == current_session_id) for s in items))


def two_factor_setup(setup: TotpSetup) -> dict[str, Any]:
    """`{secret, otpauth_url, qr_svg}`."""
    return dump_one(_TWO_FACTOR_SETUP, setup)


def recovery_codes(codes: Sequence[str]) -> dict[str, Any]:
    """`{recovery_codes: [...]}`."""
    return dump_one(_RECOVERY_CODES, {"recovery_codes": codes})


def oauth_providers(links: Sequence[ProviderLink]) -> list[dict[str, Any]]:
    """`[{name, auth_url, state, code_verifier, code_challenge, code_challenge_method}]`."""
    return dump_many(_OAUTH_PROVIDER, links)


# --- API keys --------------------------------------------------------------------------------


class ApiKeySchema(Representation):
    """An API key without its secret (list items)."""

    id = fields.String()
    name = fields.String()
    scopes = fields.List(fields.String())
    expires_at = Timestamp(allow_none=True)
    created = Timestamp()
    last_used = Timestamp(allow_none=True)


class ApiKeyCreatedSchema(ApiKeySchema):
    """Dumps `(api_key, secret)`: the key with its secret, in the create answer only."""

    key = fields.String(metadata={"description": "the secret, shown only in this answer"})

    def get_attribute(self, obj: Any, attr: str, default: Any) -> Any:
        """`key` from the pair's secret, the rest from the key."""
        api_key, secret = obj
        return secret if attr == "key" else super().get_attribute(api_key, attr, default)


_API_KEY = ApiKeySchema()
_API_KEY_CREATED = ApiKeyCreatedSchema()


def api_keys(keys: Sequence[ApiKey]) -> list[dict[str, Any]]:
    """`[{id, name, scopes, expires_at, created, last_used}]`, no secrets."""
    return dump_many(_API_KEY, keys)


def api_key_created(key: ApiKey, secret: str) -> dict[str, Any]:
    """`{id, name, scopes, expires_at, created, last_used, key}`: `key` is the secret, shown once."""
    return dump_one(_API_KEY_CREATED, (key, secret))
