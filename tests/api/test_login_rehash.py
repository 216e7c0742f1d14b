"""Password hashes made with the former parameters (RFC 9106's low-memory profile: 64 MiB, t=3, p=4)
still sign in, and the first successful login replaces them with a hash of the current parameters
(OWASP's minimum: 19 MiB, t=2, p=1), in both user systems: the admin table and an auth collection
(issue 38, item 7). A failed login changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

import pytest
from argon2 import PasswordHasher, extract_parameters

from cms.clock import utcnow
from cms.security import passwords
from cms.store.admin_users import AdminUserRepository
from cms.store.client import Database
from cms.store.collection_users import CollectionUserRepository
from tests.conftest import TEST_PASSWORD_PARAMETERS, Client, create_collection

PASSWORD = "rehash-password-1"
EMAIL = "rehash@example.com"
ADMIN_AUTH = "/api/v1/auth"
MEMBERS_AUTH = "/api/v1/collections/members/auth"

StoredHash = Callable[[], Awaitable[str]]
PlantHash = Callable[[str], Awaitable[None]]


@pytest.fixture
def default_parameters() -> Iterator[None]:
    """This test hashes as a server does (OWASP's minimum), not with the suite's cheap parameters."""
    passwords.use_parameters(passwords.DEFAULT_PARAMETERS)
    yield
    passwords.use_parameters(TEST_PASSWORD_PARAMETERS)


@pytest.fixture(params=["admin-table", "auth-collection"])
async def account(request: pytest.FixtureRequest, client: Client, admin_token: str, mongo_db: Database
                  ) -> tuple[str, StoredHash, PlantHash]:
    """A registered account of one user system: (its auth path, read its stored hash, store a hash),
    both through the system's repository."""
    base, collection_id = ADMIN_AUTH, ""
    if request.param == "auth-collection":
        base = MEMBERS_AUTH
        collection_id = (await create_collection(client, admin_token, "members", [], type="auth"))["id"]
    response = await client.post(f"{base}/register", json={"email": EMAIL, "password": PASSWORD})
    assert response.status == 201, await response.text()
    user_id = (await response.json())["user"]["id"]
    if request.param == "admin-table":
        admins = AdminUserRepository(mongo_db)

        async def stored() -> str:
            user = await admins.get(user_id)
            assert user is not None
            return user.password_hash

        async def plant(password_hash: str) -> None:
            await admins.update(user_id, utcnow(), password_hash=password_hash)
    else:
        members = CollectionUserRepository(mongo_db)

        async def stored() -> str:
            user = await members.get(collection_id, user_id)
            assert user is not None
            return user.password_hash

        async def plant(password_hash: str) -> None:
            await members.set_password_hash(collection_id, user_id, password_hash)
    return base, stored, plant


async def login_status(client: Client, base: str, password: str) -> int:
    response = await client.post(f"{base}/login", json={"email": EMAIL, "password": password})
    return response.status


async def test_an_old_profile_hash_signs_in_and_is_replaced_by_the_default_profile(
        client: Client, account: tuple[str, StoredHash, PlantHash], default_parameters: None) -> None:
    base, stored, plant = account
    old = PasswordHasher.from_parameters(passwords.PREVIOUS_PARAMETERS).hash(PASSWORD)
    await plant(old)

    assert await login_status(client, base, PASSWORD) == 200
    upgraded = await stored()
    assert upgraded != old and upgraded.startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    assert extract_parameters(upgraded) == passwords.DEFAULT_PARAMETERS
    assert passwords.verify_password(upgraded, PASSWORD)

    assert await login_status(client, base, PASSWORD) == 200  # the new hash signs in and is kept
    assert await stored() == upgraded


async def test_a_failed_login_upgrades_nothing(client: Client, account: tuple[str, StoredHash, PlantHash],
                                              default_parameters: None) -> None:
    base, stored, plant = account
    old = PasswordHasher.from_parameters(passwords.PREVIOUS_PARAMETERS).hash(PASSWORD)
    await plant(old)

    assert await login_status(client, base, "not-the-password-1") == 401
    assert await stored() == old
