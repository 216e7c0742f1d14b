"""Account flows of both user systems through the client (decisions.md, Clients; Identity and tokens): email
verification, password reset, email change, change password, sessions and their revocation. Emailed links are
read from the server's log (the run's server has no SMTP_HOST: it logs each email)."""

from __future__ import annotations

import pytest
from conftest import Service, emailed_token, unique

from cms_client import AsyncCmsClient, CmsClient, CmsError

pytestmark = pytest.mark.anyio

PASSWORD = "a-long-enough-password"
NEW_PASSWORD = "another-long-password"


async def test_admin_table_verification_reset_change_password_and_sessions(service: Service) -> None:
    email = f"{unique('staff')}@example.com"
    async with AsyncCmsClient(service.url) as client, AsyncCmsClient(service.url) as other_device:
        since = len(service.log_text())
        await client.auth.register(email, PASSWORD, name="Staff")
        await client.auth.confirm_verification(emailed_token(service, email, since))
        await client.auth.auth_with_password(email, PASSWORD)
        assert (await client.auth.me())["verified"] is True
        assert "already verified" in (await client.auth.request_verification())["message"]
        with pytest.raises(CmsError) as spent:
            await client.auth.confirm_verification("not-a-token")
        assert (spent.value.status, spent.value.code) == (400, "token_invalid")

        since = len(service.log_text())
        await client.auth.request_password_reset(email)
        await client.auth.confirm_password_reset(emailed_token(service, email, since), NEW_PASSWORD)
        with pytest.raises(CmsError):
            await client.auth.me()  # the reset revoked every session
        assert client.auth_store.token == ""  # the refused refresh cleared the store
        await client.auth.auth_with_password(email, NEW_PASSWORD)

        await other_device.auth.auth_with_password(email, NEW_PASSWORD)
        await client.auth.change_password(NEW_PASSWORD, PASSWORD)
        assert (await client.auth.me())["email"] == email  # this session stays
        with pytest.raises(CmsError) as revoked:
            await other_device.auth.me()
        assert revoked.value.status == 401

        await other_device.auth.auth_with_password(email, PASSWORD)
        with CmsClient(service.url) as third_device:
            third_device.auth.auth_with_password(email, PASSWORD)
        sessions = await client.auth.list_sessions()
        assert len(sessions) == 3 and [s["current"] for s in sessions].count(True) == 1
        assert await client.auth.revoke_other_sessions() == 2
        assert [s["current"] for s in await client.auth.list_sessions()] == [True]
        await other_device.auth.auth_with_password(email, PASSWORD)
        mine = next(s for s in await other_device.auth.list_sessions() if s["current"])
        await other_device.auth.revoke_session(mine["id"])
        assert other_device.auth_store.token == ""
        await client.auth.revoke_all_sessions()
        assert client.auth_store.token == ""
        with pytest.raises(CmsError):
            await client.auth.me()


async def test_collection_users_verify_change_email_and_reset(service: Service) -> None:
    name = unique("members")
    email, new_email = f"{unique('ann')}@example.com", f"{unique('ann-new')}@example.com"
    async with AsyncCmsClient(service.url) as admin:
        await admin.auth.auth_with_password(service.admin_email, service.admin_password)
        await admin.collections.create({"name": name, "type": "auth", "schema": []})
    with CmsClient(service.url) as client:  # the blocking flavour, the same calls
        users = client.collection(name).auth
        since = len(service.log_text())
        users.register(email, PASSWORD)
        users.confirm_verification(emailed_token(service, email, since))
        users.auth_with_password(email, PASSWORD)
        assert users.me()["verified"] is True

        since = len(service.log_text())
        users.request_email_change(new_email, PASSWORD)
        users.confirm_email_change(emailed_token(service, new_email, since))
        with pytest.raises(CmsError):
            users.auth_with_password(email, PASSWORD)
        users.auth_with_password(new_email, PASSWORD)

        since = len(service.log_text())
        users.request_password_reset(new_email)
        users.confirm_password_reset(emailed_token(service, new_email, since), NEW_PASSWORD, NEW_PASSWORD)
        assert users.auth_with_password(new_email, NEW_PASSWORD)["token"]
        assert client.auth_store.auth_path == f"/api/v1/collections/{name}/auth"
        with pytest.raises(CmsError) as wrong:
            users.change_password("not-the-password", PASSWORD)
        assert wrong.value.status == 422
