"""How tests reach both user systems over HTTP: the admin table and the auth collection `members`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.conftest import bearer, create_collection

EMAIL = "person@example.com"
PASSWORD = "person-password-1"
NEW_PASSWORD = "person-password-2"


@dataclass(frozen=True)
class System:
    """How a test reaches one user system over HTTP."""

    name: str
    auth: str  # the auth base path

    async def register(self, client: Any, email: str = EMAIL) -> dict[str, Any]:
        response = await client.post(f"{self.auth}/register", json={"email": email, "password": PASSWORD})
        assert response.status == 201, await response.text()
        user: dict[str, Any] = (await response.json())["user"]
        return user

    async def login_response(self, client: Any, email: str = EMAIL, password: str = PASSWORD,
                             user_agent: str = "pytest") -> dict[str, Any]:
        """POST login (asserting 200) and return the whole login response."""
        response = await client.post(f"{self.auth}/login", json={"email": email, "password": password},
                                     headers={"User-Agent": user_agent})
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body

    async def login(self, client: Any, email: str = EMAIL, password: str = PASSWORD,
                    user_agent: str = "pytest") -> dict[str, Any]:
        """Log in and return the token object."""
        token: dict[str, Any] = (await self.login_response(client, email, password, user_agent))["token"]
        return token

    async def me_status(self, client: Any, token: dict[str, Any]) -> int:
        status: int = (await client.get(f"{self.auth}/me", headers=bearer(token["access_token"]))).status
        return status


ADMIN_TABLE = System("admin", "/api/v1/auth")
MEMBERS = System("members", "/api/v1/collections/members/auth")




async def prepare(system: System, client: Any, admin_token: str, **collection: Any) -> System:
    """Create `members` when `system` is it (`collection`: extra attributes, e.g. mfa_enabled) and
    register EMAIL in `system`."""
    if system is MEMBERS:
        await create_collection(client, admin_token, "members", [{"name": "nickname", "type": "text"}], type="auth",
                                **collection)
    await system.register(client)
    return system
