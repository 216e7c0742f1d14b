from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import jwt
import pytest
from conftest import Service, emailed_code, totp, unique

from cms_client import ADMIN_AUTH_PATH, AsyncCmsClient, AuthStore, CmsError

pytestmark = pytest.mark.anyio

PASSWORD = "a-long-enough-password"


async def make_users_collection(service: Service, **options: Any) -> str:
    name = unique("members")
    async with AsyncCmsClient(service.url) as admin:
        await admin.auth.auth_with_password(service.admin_email, service.admin_password)
        await admin.collections.create({"name": name, "type": "auth", "schema": [{"name": "nick", "type": "text"}],
                                        **options})
    return name


async def test_admin_password_login_me_and_wrong_password(service: Service) -> None:
    async with AsyncCmsClient(service.url) as client:
        changes: list[str] = []
        stop = client.auth_store.on_change(lambda store: changes.append(store.token))
        answer = await client.auth.auth_with_password(service.admin_email, service.admin_password)
        assert answer["requires_2fa"] is False
        assert client.auth_store.token and client.auth_store.record is not None
        assert client.auth_store.record["email"] == service.admin_email
        assert client.auth_store.auth_path == ADMIN_AUTH_PATH
        assert changes == [client.auth_store.token]
        assert (await client.auth.me())["email"] == service.admin_email
        stop()
        await client.auth.logout()
        assert changes == [changes[0]]  # the listener was stopped before logout
        cleared = client.auth_store
        assert cleared.token == "" and cleared.record is None

        with pytest.raises(CmsError) as caught:
            await client.auth.auth_with_password(service.admin_email, "wrong-password")
        assert (caught.value.status, caught.value.code) == (401, "invalid_credentials")


async def test_refresh_rotates_and_a_spent_refresh_token_revokes(service: Service) -> None:
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        first_refresh = client.auth_store.refresh_token
        pair = await client.refresh()
        assert pair["refresh_token"] == client.auth_store.refresh_token != first_refresh
        assert pair["access_token"] == client.auth_store.token
        assert (await client.auth.me())["email"] == service.admin_email

        spent = httpx.post(service.url + "/api/v1/auth/refresh", json={"refresh_token": first_refresh})
        assert spent.status_code == 401  # reuse detection: the session is revoked
        with pytest.raises(CmsError) as caught:
            await client.auth.me()
        assert caught.value.status == 401
        assert client.auth_store.token == ""  # the refusal of the refresh cleared the store


async def test_logout_revokes_the_session(service: Service) -> None:
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        token = client.auth_store.token
        await client.auth.logout()
        assert client.auth_store.token == ""
        me = httpx.get(service.url + "/api/v1/auth/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 401


def expired_copy(token: str, secret: str) -> str:
    claims = jwt.decode(token, options={"verify_signature": False})
    claims["iat"], claims["exp"] = int(time.time()) - 7200, int(time.time()) - 3600
    return jwt.encode(claims, secret, algorithm="HS256")


async def test_an_expired_access_token_is_refreshed_once_for_concurrent_calls(service: Service) -> None:
    if service.secret_key is None:
        pytest.skip("minting an expired token needs CMS_SECRET_KEY")
    statuses: list[tuple[str, int]] = []

    async def record(response: httpx.Response) -> None:
        statuses.append((response.request.url.path, response.status_code))

    http = httpx.AsyncClient(event_hooks={"response": [record]})
    async with AsyncCmsClient(service.url, http=http, refresh_margin_s=None) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        store = client.auth_store
        old_refresh = store.refresh_token
        store.save(expired_copy(store.token, service.secret_key), old_refresh)
        assert not store.is_valid()
        saves: list[str] = []
        store.on_change(lambda s: saves.append(s.refresh_token))

        answers = await asyncio.gather(*(client.auth.me() for _ in range(5)))
        assert {answer["email"] for answer in answers} == {service.admin_email}
        assert len(saves) == 1 and saves[0] != old_refresh  # exactly one refresh, rotated
        assert [path for path, _ in statuses].count("/api/v1/auth/refresh") == 1
        assert statuses.count(("/api/v1/auth/me", 401)) == 5  # each call met the server's 401, then retried
        assert statuses.count(("/api/v1/auth/me", 200)) == 5
    await http.aclose()


async def test_a_token_about_to_expire_is_refreshed_before_the_call(service: Service) -> None:
    if service.secret_key is None:
        pytest.skip("minting an expired token needs CMS_SECRET_KEY")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        store = client.auth_store
        store.save(expired_copy(store.token, service.secret_key), store.refresh_token)
        saves: list[str] = []
        store.on_change(lambda s: saves.append(s.token))
        await asyncio.gather(*(client.auth.me() for _ in range(3)))
        assert len(saves) == 1 and store.is_valid(margin_s=60)


async def test_collection_register_login_otp_and_two_factor(service: Service) -> None:
    name = await make_users_collection(service, otp_enabled=True, mfa_enabled=True)
    email = f"{unique('user')}@example.com"
    async with AsyncCmsClient(service.url) as client:
        users = client.collection(name).auth
        registered = await users.register(email, PASSWORD, nick="ada")
        assert registered["user"]["email"] == email and client.auth_store.token == ""

        login = await users.auth_with_password(email, PASSWORD)
        assert login["requires_2fa"] is False
        assert client.auth_store.auth_path == f"/api/v1/collections/{name}/auth"
        assert (await users.me())["nick"] == "ada"
        assert (await users.refresh())["access_token"] == client.auth_store.token  # refresh of this system

        # OTP: the code is emailed; without SMTP the server logs the email
        await client.auth.logout()
        since = len(service.log_text())
        await users.request_otp(email)
        code = emailed_code(service, email, since)
        otp_login = await users.auth_with_otp(email, code)
        assert otp_login["token"] and client.auth_store.record is not None
        assert client.auth_store.record["email"] == email
        with pytest.raises(CmsError) as reused:
            await users.auth_with_otp(email, code)
        assert reused.value.status in (400, 401)

        # 2FA (TOTP): enrol, then a password login asks for the second step
        setup = await users.setup_2fa()
        codes = await users.enable_2fa(totp(setup["secret"]))
        assert len(codes["recovery_codes"]) > 0
        await client.auth.logout()
        first = await users.auth_with_password(email, PASSWORD)
        assert first["requires_2fa"] is True and client.auth_store.token == ""
        with pytest.raises(CmsError) as wrong:
            await users.verify_2fa(first["mfa_token"], "000000" if totp(setup["secret"]) != "000000" else "111111")
        assert (wrong.value.status, wrong.value.code) == (400, "otp_invalid")
        second = await users.verify_2fa(first["mfa_token"], codes["recovery_codes"][0])
        assert second["token"] and client.auth_store.token
        assert (await users.me())["email"] == email
        assert (await users.disable_2fa(PASSWORD, codes["recovery_codes"][1]))["message"]  # the TOTP code was spent


async def test_oauth2_helpers(service: Service) -> None:
    name = await make_users_collection(service)
    async with AsyncCmsClient(service.url) as client:
        users = client.collection(name).auth
        providers = await users.oauth2_providers("https://app.example.com/callback")
        assert isinstance(providers, list)  # none configured on the test server
        provider: Any = {"name": "example", "auth_url": "https://id.example.com/authorize?state=s1&redirect_uri=",
                         "state": "s1.sig", "code_verifier": "v" * 43, "code_challenge": "c",
                         "code_challenge_method": "S256"}
        assert users.oauth2_authorize_url(provider, "https://app.example.com/cb") == (
            "https://id.example.com/authorize?state=s1&redirect_uri=https%3A%2F%2Fapp.example.com%2Fcb")
        with pytest.raises(ValueError, match="state"):
            await users.auth_with_oauth2_code(provider, "code", "other.state", "https://app.example.com/cb")
        with pytest.raises(CmsError) as caught:
            await users.auth_with_oauth2_code(provider, "code", "s1.sig", "https://app.example.com/cb")
        assert 400 <= caught.value.status < 500 and caught.value.code


async def test_auth_store_can_be_shared_and_subclassed(service: Service) -> None:
    saved: list[str] = []

    class RememberingStore(AuthStore):
        def save(self, token: str, refresh_token: str, record: dict[str, Any] | None = None,
                 auth_path: str | None = None) -> None:
            saved.append(refresh_token)
            super().save(token, refresh_token, record, auth_path)

    store = RememberingStore()
    async with AsyncCmsClient(service.url, auth_store=store) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
    async with AsyncCmsClient(service.url, auth_store=store) as again:
        assert (await again.auth.me())["email"] == service.admin_email
    assert saved == [store.refresh_token]
