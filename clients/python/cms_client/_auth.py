"""The flows of both user systems (decisions.md, Identity and tokens; Two-factor login), written once:
`auth_path` is `/api/v1/auth` (the admin table) or `/api/v1/collections/{name}/auth` (an auth collection)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from cms_client._core import Call, Flow, ask, segment
from cms_client.auth_store import AuthStore, token_claims
from cms_client.errors import CmsError
from cms_client.shapes import AuthAnswer, Message, OAuthProvider, RecoveryCodes, Session, Token, TwoFactorSetup


def remember(store: AuthStore, answer: AuthAnswer, auth_path: str) -> AuthAnswer:
    """Keep a login's token pair and user in `store` (a first step answering `requires_2fa` keeps nothing)."""
    token: Any = answer.get("token")
    if isinstance(token, dict) and token.get("access_token"):
        store.save(token["access_token"], token["refresh_token"], dict(answer["user"]), auth_path)
    return answer


def login(store: AuthStore, auth_path: str, step: str, body: dict[str, Any]) -> Flow[AuthAnswer]:
    """POST `<auth_path>/<step>` (`login`, `otp/verify`, `2fa/verify`, `oauth2/callback`) and remember the answer."""
    answer = yield from ask(Call[AuthAnswer]("POST", f"{auth_path}/{step}", json_body=body, auth=False))
    return remember(store, answer, auth_path)


def refresh(store: AuthStore) -> Flow[Token]:
    """Spend the store's refresh token for a new pair (rotation) and keep it. A 401 (expired, revoked, already
    spent) clears the store and is raised; without a refresh token, CmsError 401 `unauthorized`."""
    if not store.refresh_token:
        raise CmsError(401, "unauthorized", "Not signed in: no refresh token")
    call = Call[Token]("POST", f"{store.auth_path}/refresh", json_body={"refresh_token": store.refresh_token},
                       auth=False)
    try:
        token = yield from ask(call)
    except CmsError as exc:
        if exc.status == 401:
            store.clear()
        raise
    store.save(token["access_token"], token["refresh_token"])
    return token


def logout(store: AuthStore) -> Flow[None]:
    """Revoke the signed-in session on the service (`DELETE <auth_path>/sessions/<sid>`, which both user systems
    have) and clear the store, also when the service already refused the token."""
    try:
        session_id = token_claims(store.token).get("sid") if store.token else None
        if isinstance(session_id, str):
            yield from ask(Call[None]("DELETE", f"{store.auth_path}/sessions/{segment(session_id)}", expect="none"))
    except CmsError as exc:
        if exc.status != 401:
            raise
    finally:
        store.clear()


def message(auth_path: str, step: str, body: dict[str, Any] | None = None, *, auth: bool = True) -> Flow[Message]:
    """POST `<auth_path>/<step>` answering `{message}` (OTP request, 2FA disable, verification steps)."""
    return (yield from ask(Call[Message]("POST", f"{auth_path}/{step}", json_body=body, auth=auth)))


def me(auth_path: str) -> Flow[dict[str, Any]]:
    """The signed-in user as this user system shows it (admin-table user, or the collection's record)."""
    return (yield from ask(Call[dict[str, Any]]("GET", f"{auth_path}/me")))


def register(auth_path: str, email: str, password: str, fields: dict[str, Any]) -> Flow[dict[str, Any]]:
    """Create a user (`{user, message}`; a verification email is queued). `fields`: `name` for the admin table,
    the collection's own fields for an auth collection."""
    body = {"email": email, "password": password, **fields}
    return (yield from ask(Call[dict[str, Any]]("POST", f"{auth_path}/register", json_body=body, auth=False)))


def setup_2fa(auth_path: str) -> Flow[TwoFactorSetup]:
    """Start TOTP enrolment: `{secret, otpauth_url, qr_svg}`; nothing is on until `enable_2fa`."""
    return (yield from ask(Call[TwoFactorSetup]("POST", f"{auth_path}/2fa/setup")))


def enable_2fa(auth_path: str, code: str) -> Flow[RecoveryCodes]:
    """Turn TOTP on with a first code from the authenticator: `{recovery_codes}` (shown once)."""
    return (yield from ask(Call[RecoveryCodes]("POST", f"{auth_path}/2fa/enable", json_body={"code": code})))


def oauth2_providers(auth_path: str, redirect_uri: str | None) -> Flow[list[OAuthProvider]]:
    """The OAuth2 providers with their authorization URLs, `state` and PKCE `code_verifier` (keep both)."""
    params = {"redirect_uri": redirect_uri}
    return (yield from ask(Call[list[OAuthProvider]]("GET", f"{auth_path}/oauth2/providers", params=params,
                                                     auth=False)))


def authorize_url(provider: OAuthProvider, redirect_uri: str | None = None) -> str:
    """Where to send the user: the provider's `auth_url`, completed with `redirect_uri` when the providers were
    listed without one (the URL then ends in `&redirect_uri=`)."""
    url = provider["auth_url"]
    if redirect_uri is not None and url.endswith("redirect_uri="):
        url += quote(redirect_uri, safe="")
    return url


def oauth2_callback_body(provider: OAuthProvider, code: str, state: str, redirect_uri: str) -> dict[str, Any]:
    """The body of `oauth2/callback` for the code and state the provider sent back to `redirect_uri`.
    Raises ValueError when `state` is not the provider's (a forged or crossed redirect)."""
    if state != provider["state"]:
        raise ValueError("OAuth2 state mismatch: the redirect does not belong to this sign-in")
    return {"provider": provider["name"], "code": code, "state": state, "code_verifier": provider["code_verifier"],
            "redirect_uri": redirect_uri}


RESET_PATH = "/api/v1/auth"
"""Password resets of both user systems go through the admin table's endpoints (`collection` in the body)."""


def request_password_reset(email: str, collection: str | None) -> Flow[Message]:
    """Email a password-reset link (1 hour, single use) to `email` among the admin table's users, or `collection`'s;
    the same answer whether or not the address exists."""
    body: dict[str, Any] = {"email": email, **({"collection": collection} if collection else {})}
    return (yield from message(RESET_PATH, "request-password-reset", body, auth=False))


def confirm_password_reset(token: str, password: str, password_confirm: str | None) -> Flow[Message]:
    """Set a new password with the emailed reset token (any user system); every session of that user is revoked.
    CmsError 400 `token_invalid` / `token_expired`, 422 (policy, confirmation)."""
    body: dict[str, Any] = {"token": token, "new_password": password}
    if password_confirm is not None:
        body["password_confirm"] = password_confirm
    return (yield from message(RESET_PATH, "reset-password", body, auth=False))


def list_sessions(auth_path: str) -> Flow[list[Session]]:
    """The signed-in user's active sessions."""
    return (yield from ask(Call[list[Session]]("GET", f"{auth_path}/sessions")))


def revoke_session(store: AuthStore, auth_path: str, session_id: str) -> Flow[None]:
    """Revoke one of the signed-in user's sessions; revoking the store's own clears the store."""
    own = token_claims(store.token).get("sid") == session_id if store.token else False
    yield from ask(Call[None]("DELETE", f"{auth_path}/sessions/{segment(session_id)}", expect="none"))
    if own:
        store.clear()


def revoke_all_sessions(store: AuthStore, auth_path: str) -> Flow[None]:
    """Revoke every session of the signed-in user, the store's own included (then the store is cleared)."""
    yield from ask(Call[None]("DELETE", f"{auth_path}/sessions/all", expect="none"))
    store.clear()


def revoke_other_sessions(auth_path: str) -> Flow[int]:
    """Revoke every session of the signed-in user but the store's own (the one `current` in the list); how many."""
    sessions = yield from list_sessions(auth_path)
    others = [session["id"] for session in sessions if not session["current"]]
    for session_id in others:
        yield from ask(Call[None]("DELETE", f"{auth_path}/sessions/{segment(session_id)}", expect="none"))
    return len(others)
