"""The test OpenID Connect provider (tests/oidc_provider.py), exercised over real HTTP."""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import InvalidClaimError
from joserfc.jwk import KeySet
from yarl import URL

from tests.conftest import MovableClock
from tests.oidc_provider import AuthorizeFailed, OidcProvider, ProviderUser, running_provider

REDIRECT_URI = "http://127.0.0.1:9/oauth/callback"


@pytest.fixture
async def provider(clock: MovableClock) -> AsyncIterator[OidcProvider]:
    async with running_provider(clock=clock) as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


def auth_url(provider: OidcProvider, verifier: str, **params: str) -> str:
    """An authorization URL as a relying party builds it (S256 challenge of `verifier`)."""
    query = {"response_type": "code", "client_id": provider.client_id, "redirect_uri": REDIRECT_URI,
             "scope": "openid email profile", "state": "state-1", "nonce": "nonce-1",
             "code_challenge": create_s256_code_challenge(verifier), "code_challenge_method": "S256", **params}
    return str(URL(provider.authorization_endpoint).with_query(query))


async def exchange(http: aiohttp.ClientSession, provider: OidcProvider, code: str, verifier: str,
                   *, basic: bool = False, **fields: str) -> tuple[int, dict[str, Any]]:
    """POST the token request for `code` and return (status, body)."""
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI,
            "code_verifier": verifier}
    headers = {}
    if basic:
        credentials = f"{provider.client_id}:{provider.client_secret}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(credentials).decode()
    else:
        form |= {"client_id": provider.client_id, "client_secret": provider.client_secret}
    form |= fields
    async with http.post(provider.token_endpoint, data=form, headers=headers) as response:
        body: dict[str, Any] = await response.json()
        return response.status, body


async def verified_claims(http: aiohttp.ClientSession, provider: OidcProvider, id_token: str) -> dict[str, Any]:
    """Check the ID token's RS256 signature against the provider's /jwks; return its claims."""
    async with http.get(provider.discovery_url) as response:
        jwks_uri = (await response.json())["jwks_uri"]
    async with http.get(jwks_uri) as response:
        keys = KeySet.import_key_set(await response.json())
    token = jwt.decode(id_token, keys, algorithms=["RS256"])
    assert token.header["kid"] == keys.keys[0].kid
    return token.claims


async def test_discovery_document(provider, http):
    async with http.get(provider.discovery_url) as response:
        assert response.status == 200
        document = await response.json()
    assert document["issuer"] == provider.issuer
    assert provider.issuer.startswith("http://127.0.0.1:")
    for endpoint in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri"):
        assert document[endpoint].startswith(provider.issuer + "/")
    assert document["response_types_supported"] == ["code"]
    assert document["subject_types_supported"] == ["public"]
    assert document["id_token_signing_alg_values_supported"] == ["RS256"]
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert "openid" in document["scopes_supported"]
    assert set(document["token_endpoint_auth_methods_supported"]) == {"client_secret_post", "client_secret_basic"}
    async with http.get(document["jwks_uri"]) as response:
        (key,) = (await response.json())["keys"]
    assert key["kty"] == "RSA" and key["kid"] and "d" not in key


@pytest.mark.parametrize("basic", [False, True], ids=["client_secret_post", "client_secret_basic"])
async def test_code_flow_with_pkce(provider, http, basic):
    provider.user = ProviderUser(sub="subject-42", email="ada@example.com", email_verified=True, name="Ada")
    verifier = secrets.token_urlsafe(48)
    code, state = await provider.authorize(auth_url(provider, verifier))
    assert state == "state-1"

    status, body = await exchange(http, provider, code, verifier, basic=basic)

    assert status == 200, body
    assert body["token_type"] == "Bearer" and body["expires_in"] > 0 and body["scope"] == "openid email profile"
    claims = await verified_claims(http, provider, body["id_token"])
    jwt.JWTClaimsRegistry(iss={"essential": True, "value": provider.issuer},
                          aud={"essential": True, "value": provider.client_id},
                          nonce={"essential": True, "value": "nonce-1"}).validate(claims)
    assert claims["sub"] == "subject-42" and claims["email"] == "ada@example.com"
    assert claims["email_verified"] is True and claims["name"] == "Ada"
    assert claims["exp"] - claims["iat"] == 300
    assert provider.token_requests[-1]["code_verifier"] == verifier


async def test_wrong_code_verifier_is_refused(provider, http):
    code, _ = await provider.authorize(auth_url(provider, secrets.token_urlsafe(48)))

    status, body = await exchange(http, provider, code, secrets.token_urlsafe(48))

    assert (status, body["error"]) == (400, "invalid_grant")


async def test_code_is_single_use_and_reuse_revokes_its_tokens(provider, http):
    verifier = secrets.token_urlsafe(48)
    code, _ = await provider.authorize(auth_url(provider, verifier))
    status, first = await exchange(http, provider, code, verifier)
    assert status == 200

    status, body = await exchange(http, provider, code, verifier)

    assert (status, body["error"]) == (400, "invalid_grant")
    async with http.get(provider.userinfo_endpoint, headers={"Authorization": f"Bearer {first['access_token']}"}) \
            as response:
        assert response.status == 401


async def test_code_expires_after_60_seconds(provider, http, clock):
    verifier = secrets.token_urlsafe(48)
    code, _ = await provider.authorize(auth_url(provider, verifier))
    clock.advance(seconds=61)

    status, body = await exchange(http, provider, code, verifier)

    assert (status, body["error"]) == (400, "invalid_grant")


@pytest.mark.parametrize("fields, status, error", [
    ({"client_secret": "wrong"}, 401, "invalid_client"),
    ({"redirect_uri": "http://127.0.0.1:9/elsewhere"}, 400, "invalid_grant"),
    ({"grant_type": "password"}, 400, "unsupported_grant_type"),
], ids=["wrong-secret", "other-redirect-uri", "other-grant"])
async def test_token_request_errors(provider, http, fields, status, error):
    verifier = secrets.token_urlsafe(48)
    code, _ = await provider.authorize(auth_url(provider, verifier))

    answer = await exchange(http, provider, code, verifier, **fields)

    assert (answer[0], answer[1]["error"]) == (status, error)


async def test_userinfo(provider, http):
    provider.user = ProviderUser(sub="subject-7", email="grace@example.com", email_verified=False, name="Grace")
    verifier = secrets.token_urlsafe(48)
    code, _ = await provider.authorize(auth_url(provider, verifier))
    _, body = await exchange(http, provider, code, verifier)

    async with http.get(provider.userinfo_endpoint, headers={"Authorization": f"Bearer {body['access_token']}"}) \
            as response:
        assert response.status == 200
        assert await response.json() == {"sub": "subject-7", "email": "grace@example.com",
                                         "email_verified": False, "name": "Grace"}
    async with http.get(provider.userinfo_endpoint, headers={"Authorization": "Bearer not-a-token"}) as response:
        assert response.status == 401


async def test_id_token_overrides(provider, http, clock):
    provider.id_token_overrides = {"aud": "someone-else", "exp": int(clock().timestamp()) - 10, "nonce": None}
    verifier = secrets.token_urlsafe(48)
    code, _ = await provider.authorize(auth_url(provider, verifier))
    _, body = await exchange(http, provider, code, verifier)

    claims = await verified_claims(http, provider, body["id_token"])

    assert claims["aud"] == "someone-else" and "nonce" not in claims
    with pytest.raises(InvalidClaimError):
        jwt.JWTClaimsRegistry(aud={"essential": True, "value": provider.client_id}).validate(claims)


@pytest.mark.parametrize("params, error", [
    ({"code_challenge_method": "plain"}, "invalid_request"),
    ({"code_challenge": ""}, "invalid_request"),
    ({"scope": "email"}, "invalid_scope"),
    ({"response_type": "token"}, "unsupported_response_type"),
    ({"state": ""}, "invalid_request"),
], ids=["plain-pkce", "no-pkce", "no-openid-scope", "implicit", "no-state"])
async def test_authorize_refusals_redirect_with_error(provider, params, error):
    with pytest.raises(AuthorizeFailed) as refused:
        await provider.authorize(auth_url(provider, secrets.token_urlsafe(48), **params))

    assert (refused.value.status, refused.value.error) == (302, error)


@pytest.mark.parametrize("params", [{"client_id": "someone-else"}, {"redirect_uri": "javascript:alert(1)"}],
                         ids=["unknown-client", "bad-redirect-uri"])
async def test_authorize_never_redirects_to_an_unchecked_uri(provider, params):
    with pytest.raises(AuthorizeFailed) as refused:
        await provider.authorize(auth_url(provider, secrets.token_urlsafe(48), **params))

    assert (refused.value.status, refused.value.error) == (400, "invalid_request")
