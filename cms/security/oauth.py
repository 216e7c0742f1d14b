"""OAuth2 / OpenID Connect login, the pure parts (issue 14, item 2): provider configuration (the
`oauth_providers` setting), presets, masking of client secrets, and the signed `state` that binds
a login to its provider, user system, PKCE challenge and OIDC nonce.

The setting's value is a JSON string: a list of providers, each
`{name, client_id, client_secret, scopes?, discovery_url?, auth_url?, token_url?, userinfo_url?,
jwks_url?, issuer?}`. A `name` of a preset (google, github, microsoft, gitlab) fills in what is
not given; any other name needs either `discovery_url` or `auth_url` and `token_url` (and
`jwks_url` with `issuer`, or `userinfo_url`). Client secrets are write-only: reads show MASK, and
a MASK written back keeps the stored secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from cms.security.json_input import JsonInputError, decode_json

MASK = "********"
"""What a client secret reads as."""
MAX_PROVIDERS = 20
MAX_SETTING_CHARS = 64 * 1024
MAX_VALUE_CHARS = 2048
STATE_LIFETIME_S = 600
"""How long a login may stay at the provider (seconds)."""
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_URL_KEYS = ("discovery_url", "auth_url", "token_url", "userinfo_url", "jwks_url", "emails_url")


@dataclass(frozen=True)
class ProviderConfig:
    """One OAuth2 / OIDC provider. With `discovery_url` the endpoints come from the discovery
    document; `emails_url` (GitHub) lists the account's addresses with their verification."""

    name: str
    client_id: str
    client_secret: str
    scopes: tuple[str, ...] = ()
    discovery_url: str = ""
    auth_url: str = ""
    token_url: str = ""
    userinfo_url: str = ""
    jwks_url: str = ""
    issuer: str = ""
    emails_url: str = ""

    @property
    def openid(self) -> bool:
        """Whether the provider signs ID tokens (OIDC), or only serves a profile."""
        return "openid" in self.scopes


PRESETS: dict[str, dict[str, Any]] = {
    "google": {"discovery_url": "https://accounts.google.com/.well-known/openid-configuration",
               "scopes": ["openid", "email", "profile"]},
    "microsoft": {"discovery_url": "https://login.microsoftonline.com/common/v2.0/.well-known/openid-configuration",
                  "scopes": ["openid", "email", "profile"]},
    "gitlab": {"discovery_url": "https://gitlab.com/.well-known/openid-configuration",
               "scopes": ["openid", "email", "profile"]},
    "github": {"auth_url": "https://github.com/login/oauth/authorize",
               "token_url": "https://github.com/login/oauth/access_token",
               "userinfo_url": "https://api.github.com/user", "emails_url": "https://api.github.com/user/emails",
               "scopes": ["read:user", "user:email"]},
}


class ProviderConfigError(ValueError):
    """The `oauth_providers` value is not valid; the message says why (for a 422)."""


def _text(item: dict[str, Any], key: str, index: int, *, required: bool = False) -> str:
    value = item.get(key, "")
    if not isinstance(value, str) or len(value) > MAX_VALUE_CHARS:
        raise ProviderConfigError(f"providers[{index}].{key} must be a string of at most {MAX_VALUE_CHARS} characters")
    if required and not value.strip():
        raise ProviderConfigError(f"providers[{index}].{key} is required")
    if key in _URL_KEYS and value and not value.startswith(("https://", "http://")):
        raise ProviderConfigError(f"providers[{index}].{key} must be an http(s) URL")
    return value.strip()


def parse_providers(raw: str) -> list[ProviderConfig]:
    """The providers of an `oauth_providers` value, presets filled in. Raises ProviderConfigError."""
    if len(raw) > MAX_SETTING_CHARS:
        raise ProviderConfigError(f"at most {MAX_SETTING_CHARS} characters")
    try:
        items = decode_json(raw or "[]")
    except JsonInputError as exc:
        raise ProviderConfigError(f"must be a JSON list of providers ({exc})") from exc
    if not isinstance(items, list) or len(items) > MAX_PROVIDERS:
        raise ProviderConfigError(f"must be a JSON list of at most {MAX_PROVIDERS} providers")
    providers: list[ProviderConfig] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProviderConfigError(f"providers[{index}] must be an object")
        name = _text(item, "name", index, required=True)
        if not NAME_PATTERN.fullmatch(name) or name in (p.name for p in providers):
            raise ProviderConfigError(f"providers[{index}].name must be unique and match {NAME_PATTERN.pattern}")
        client_id = _text(item, "client_id", index, required=True)
        preset = PRESETS.get(name, {})
        values = {key: _text(item, key, index) or preset.get(key, "") for key in (*_URL_KEYS, "issuer")}
        scopes = item.get("scopes", preset.get("scopes", ["openid", "email", "profile"]))
        if (not isinstance(scopes, list) or not all(isinstance(s, str) and 0 < len(s) <= 100 for s in scopes)
                or len(scopes) > 20):
            raise ProviderConfigError(f"providers[{index}].scopes must be a list of at most 20 scope names")
        if not values["discovery_url"] and not (values["auth_url"] and values["token_url"]):
            raise ProviderConfigError(f"providers[{index}] needs discovery_url, or auth_url and token_url")
        config = ProviderConfig(name=name, client_id=client_id,
                                client_secret=_text(item, "client_secret", index), scopes=tuple(scopes), **values)
        if not config.discovery_url and not (config.openid and config.jwks_url and config.issuer) \
                and not config.userinfo_url:
            raise ProviderConfigError(f"providers[{index}] needs jwks_url and issuer (OIDC) or userinfo_url")
        providers.append(config)
    return providers


def dump_providers(providers: list[ProviderConfig]) -> str:
    """The JSON text of `providers` as stored (secrets included)."""
    return json.dumps([{k: (list(v) if k == "scopes" else v) for k, v in asdict(p).items() if v}
                       for p in providers])


def normalized(raw: str) -> str:
    """An `oauth_providers` value as stored: checked, presets filled in. Raises ProviderConfigError."""
    return dump_providers(parse_providers(raw))


def merged(new_raw: str, stored_raw: str) -> str:
    """What a change to `new_raw` stores when `stored_raw` is stored: masked secrets kept (see
    `with_kept_secrets`). Raises ProviderConfigError."""
    return dump_providers(with_kept_secrets(parse_providers(new_raw), stored_raw))


def masked(raw: str) -> str:
    """The value as a read shows it: every non-empty client secret replaced by MASK."""
    try:
        providers = parse_providers(raw)
    except ProviderConfigError:
        return "[]"
    return dump_providers([replace(p, client_secret=MASK if p.client_secret else "") for p in providers])


def _where_secret_goes(provider: ProviderConfig) -> tuple[str, ...]:
    """What decides where a provider's client secret is sent: its client id and every endpoint."""
    return (provider.client_id, provider.discovery_url, provider.auth_url, provider.token_url, provider.userinfo_url,
            provider.jwks_url, provider.issuer, provider.emails_url)


def with_kept_secrets(new: list[ProviderConfig], stored_raw: str) -> list[ProviderConfig]:
    """`new` with each MASK secret replaced by the stored secret of the provider of that name, so an
    admin can write back what a read showed. A MASK is kept only while the provider's client id and
    endpoints are unchanged (else the stored secret could be sent somewhere new): ProviderConfigError
    then, as when no secret is stored under that name."""
    try:
        stored = {p.name: p for p in parse_providers(stored_raw)}
    except ProviderConfigError:
        stored = {}
    kept = []
    for index, provider in enumerate(new):
        if provider.client_secret == MASK:
            before = stored.get(provider.name)
            if before is None or _where_secret_goes(before) != _where_secret_goes(provider):
                raise ProviderConfigError(f"providers[{index}].client_secret must be given again: the stored one is "
                                          "kept only while the provider's client_id and endpoints stay the same")
            provider = replace(provider, client_secret=before.client_secret)
        kept.append(provider)
    return kept


# --- state ----------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class LoginState:
    """What a `state` carries: the provider, the user system's audience, the PKCE challenge, the
    OIDC nonce and the expiry (Unix seconds)."""

    provider: str
    audience: str
    code_challenge: str
    nonce: str
    expires_at: int


def sign_state(state: LoginState, key: bytes) -> str:
    """`state` as an opaque string: base64url JSON and its HMAC-SHA256 under `key`."""
    body = _b64(json.dumps(asdict(state), separators=(",", ":")).encode())
    return f"{body}.{_b64(hmac.new(key, body.encode(), hashlib.sha256).digest())}"


def read_state(text: str, key: bytes, now_s: int) -> LoginState | None:
    """The state signed by `sign_state` with `key`, or None when it is malformed, forged or past
    its expiry (`now_s`: Unix seconds)."""
    if len(text) > 2048 or not text.isascii() or text.count(".") != 1:
        return None
    body, signature = text.split(".")
    expected = _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(expected, signature):
        return None
    try:
        values = json.loads(_unb64(body))
        state = LoginState(**values)
    except (ValueError, TypeError):
        return None
    return state if now_s < state.expires_at else None
