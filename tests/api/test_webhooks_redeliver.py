"""`POST /api/v1/webhooks/deliveries/{id}/redeliver` ("send again", issue 15): the same body to
the same webhook as a new delivery, through the outbox and a worker, to a real receiver."""

from __future__ import annotations

import json

from cms.security.signing import verify
from tests.api.test_webhooks import SECRET, WEBHOOKS, config, make_webhook, posts, receiver  # noqa: F401
from tests.conftest import bearer, create_record, error_of


def redeliver_path(entry_id: str) -> str:
    return f"{WEBHOOKS}/deliveries/{entry_id}/redeliver"


async def test_send_again_delivers_the_same_body_as_a_new_delivery(client, admin_token, posts, receiver,  # noqa: F811
                                                                     run_jobs):
    receiver.script = [500]
    hook = await make_webhook(client, admin_token, receiver.url, secret=SECRET, retry_count=1)
    record = await create_record(client, admin_token, "posts", {"title": "again"})
    await run_jobs()
    log_path = f"{WEBHOOKS}/{hook['id']}/deliveries"
    log = await (await client.get(log_path, headers=bearer(admin_token))).json()
    assert [(e["attempt"], e["status_code"]) for e in log["items"]] == [(2, 200), (1, 500)]

    response = await client.post(redeliver_path(log["items"][0]["id"]), headers=bearer(admin_token))  # attempt 2's id
    assert response.status == 202, await response.text()
    queued = await response.json()
    assert set(queued) == {"delivery_id", "webhook_id", "event", "collection", "record_id", "created"}
    assert (queued["webhook_id"], queued["event"], queued["record_id"]) == (hook["id"], "create", record["id"])
    await run_jobs()

    assert len(receiver.requests) == 3
    (first_headers, first_body, _), (headers, body, _) = receiver.requests[0], receiver.requests[2]
    assert body == first_body and json.loads(body)["data"] == record  # the same body ...
    assert headers["X-Webhook-Delivery"] == queued["delivery_id"] != first_headers["X-Webhook-Delivery"]  # ... anew
    assert verify(SECRET, body, headers["X-Webhook-Signature"])
    log = await (await client.get(log_path, headers=bearer(admin_token))).json()
    assert log["total"] == 3
    again = next(e for e in log["items"] if e["id"] == queued["delivery_id"])
    assert (again["attempt"], again["status_code"], again["success"]) == (1, 200, True)


async def test_send_again_is_refused_when_it_cannot_be_sent(client, admin_token, user_token, posts,  # noqa: F811
                                                            receiver, run_jobs):  # noqa: F811
    hook = await make_webhook(client, admin_token, receiver.url)
    await create_record(client, admin_token, "posts", {"title": "x"})
    await run_jobs()
    entry = (await (await client.get(f"{WEBHOOKS}/deliveries/recent", headers=bearer(admin_token))).json())["items"][0]
    await error_of(await client.post(redeliver_path(entry["id"])), 401, "unauthorized")
    await error_of(await client.post(redeliver_path("no-such-entry"), headers=bearer(admin_token)), 404, "not_found")
    # role `user` manages only their own webhooks
    await error_of(await client.post(redeliver_path(entry["id"]), headers=bearer(user_token)), 404, "not_found")
    await client.patch(f"{WEBHOOKS}/{hook['id']}", headers=bearer(admin_token), json={"active": False})
    await error_of(await client.post(redeliver_path(entry["id"]), headers=bearer(admin_token)), 400, "bad_request")
    await client.delete(f"{WEBHOOKS}/{hook['id']}", headers=bearer(admin_token))
    await error_of(await client.post(redeliver_path(entry["id"]), headers=bearer(admin_token)), 404, "not_found")
    await run_jobs()
    assert len(receiver.requests) == 1
