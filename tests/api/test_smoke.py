"""A first end-to-end pass: register, verify by the emailed link, collection, records."""

from tests.conftest import bearer, link_token


async def test_register_verify_and_records(client, mailbox, run_jobs, admin_token):
    response = await client.post("/api/v1/auth/register", json={"email": "new@example.com", "password": "password-1"})
    assert response.status == 201
    await run_jobs()
    token = link_token(mailbox.last_to("new@example.com"))
    response = await client.post("/api/v1/auth/verify-email", json={"token": token})
    assert response.status == 200, await response.text()

    response = await client.post("/api/v1/collections", headers=bearer(admin_token), json={
        "name": "posts", "type": "base",
        "schema": [{"name": "title", "type": "text", "validation": {"required": True}}]})
    assert response.status == 201, await response.text()
    response = await client.post("/api/v1/collections/posts/records", headers=bearer(admin_token),
                                 json={"data": {"title": "Hello"}})
    assert response.status == 201, await response.text()
    response = await client.get("/api/v1/collections/posts/records", params={"filter": "title~hell"})
    body = await response.json()
    assert body["total"] == 1 and body["items"][0]["title"] == "Hello"
