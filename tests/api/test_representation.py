"""Every JSON answer the API documents validates against /openapi.json (cms/services/representation:
the response schemas dump the answers and are what the document shows, so the two cannot drift).

One journey calls each route that has a documented JSON response for real (both user systems with
2FA, OAuth2, OTP, email change and password reset; collections, records, CSV, files, webhooks with
a delivery, API keys, audit, settings, backups, health) and validates each answer against the
document's schema of its status: OpenAPI 3.0 with `$ref`, `nullable` and `oneOf`, each shape's
fields `required` and no others allowed. A route added with a documented response and no call here
fails the test, so a new answer is checked from its first day."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import aiohttp
import pyotp
from openapi_schema_validator import OAS30Validator

from cms.api.routes import ROUTES
from cms.store.query_shapes import shape_of
from tests.api.test_collection_auth import mail_with_subject
from tests.api.test_oauth import configure, provider, providers_value  # noqa: F401
from tests.api.test_read_cache import queries_of
from tests.api.test_webhooks import config, make_webhook, receiver  # noqa: F401
from tests.conftest import (
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    bearer,
    create_collection,
    create_record,
    link_token,
    records_path,
    text_body,
)

V1 = "/api/v1"
MEMBERS = V1 + "/collections/{collection_name}/auth"
RECORDS = V1 + "/collections/{collection_name}/records"
PASSWORD, NEW_PASSWORD = "person-password-1", "person-password-2"
REDIRECT_URI = "https://app.example.com/oauth-return"

DOCUMENTED = {(r.method, r.path) for r in ROUTES
              if r.in_docs and r.response is not None and r.produces == "application/json"}
"""(method, path template) of every route whose success answer the document describes."""


@dataclass
class Contract:
    """Calls routes by their template and checks each answer against the document."""

    client: Any
    document: dict[str, Any]
    checked: set[tuple[str, str]] = field(default_factory=set)

    async def call(self, method: str, template: str, token: str | None = None, *,
                   args: dict[str, str] | None = None, **request: Any) -> Any:
        """Send the request (`args` fill the template's path parameters), assert the route's
        documented success status and that the JSON answer validates; return the answer."""
        route = next(r for r in ROUTES if (r.method, r.path) == (method, template))
        headers = {**bearer(token)} if token else {}
        response = await self.client.request(method, template.format(**(args or {})), headers=headers, **request)
        assert response.status == route.status, f"{method} {template}: {response.status} {await response.text()}"
        body = await response.json()
        responses = self.document["paths"][template][method.lower()]["responses"]
        schema = responses[str(route.status)]["content"]["application/json"]["schema"]
        errors = list(OAS30Validator({**schema, "components": self.document["components"]}).iter_errors(body))
        assert not errors, f"{method} {template} answered off its documented shape: {errors[0].message}\n{body}"
        self.checked.add((method, template))
        return body


async def mail_token(run_jobs: Any, mailbox: Any, address: str, subject: str) -> str:
    await run_jobs()
    return link_token(mail_with_subject(mailbox, address, subject))


async def user_system(c: Contract, auth: str, args: dict[str, str], email: str, clock: Any, oidc: Any,
                      run_jobs: Any, mailbox: Any) -> str:
    """Every route both user systems share, under `auth` (a template); returns an access token."""
    await c.call("POST", auth + "/register", json={"email": email, "password": PASSWORD}, args=args)
    token = await mail_token(run_jobs, mailbox, email, "Verify your email address")
    await c.call("POST", auth + "/verify-email", json={"token": token}, args=args)
    login = await c.call("POST", auth + "/login", json={"email": email, "password": PASSWORD}, args=args)
    access = login["token"]["access_token"]
    await c.call("POST", auth + "/refresh", json={"refresh_token": login["token"]["refresh_token"]}, args=args)
    await c.call("GET", auth + "/me", access, args=args)
    await c.call("POST", auth + "/resend-verification", access, args=args)
    assert await c.call("GET", auth + "/sessions", access, args=args)
    await c.call("POST", auth + "/me/change-password", access, args=args,
                 json={"old_password": PASSWORD, "new_password": NEW_PASSWORD})
    # two-factor: the pending login answer has a shape of its own
    setup = await c.call("POST", auth + "/2fa/setup", access, args=args)
    code = pyotp.TOTP(setup["secret"]).at(clock())
    codes = (await c.call("POST", auth + "/2fa/enable", access, args=args, json={"code": code}))["recovery_codes"]
    pending = await c.call("POST", auth + "/login", json={"email": email, "password": NEW_PASSWORD}, args=args)
    assert pending["requires_2fa"] is True and set(pending["user"]) == {"id", "email"}
    await c.call("POST", auth + "/2fa/verify", args=args, json={"mfa_token": pending["mfa_token"], "code": codes[0]})
    await c.call("POST", auth + "/2fa/disable", access, args=args, json={"password": NEW_PASSWORD, "code": codes[1]})
    # OAuth2: a provider account with another address signs in as a new user
    links = await c.call("GET", auth + "/oauth2/providers", args=args, params={"redirect_uri": REDIRECT_URI})
    oauth_code, state = await oidc.authorize(links[0]["auth_url"])
    await c.call("POST", auth + "/oauth2/callback", args=args, json={
        "provider": "local", "code": oauth_code, "code_verifier": links[0]["code_verifier"], "state": state,
        "redirect_uri": REDIRECT_URI})
    return str(access)


async def test_every_documented_answer_validates_against_the_document(client, services, clock, mailbox, run_jobs,
                                                                     provider, receiver):  # noqa: F811
    await services.settings.set("rate_limit_enabled", False)
    await services.settings.set("mfa_enabled", True)
    await services.identity.registration.create_admin(ADMIN_EMAIL, ADMIN_PASSWORD)
    c = Contract(client, await (await client.get("/openapi.json")).json())
    admin = (await c.call("POST", V1 + "/auth/login", json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD}))
    admin_token = admin["token"]["access_token"]
    assert (await configure(client, admin_token, providers_value(provider))).status == 200

    # collections
    posts = await c.call("POST", V1 + "/collections", admin_token, json={"name": "posts", "schema": [
        {"name": "title", "type": "text", "validation": {"max": 200}}, {"name": "views", "type": "number"}],
        "versions": 5})
    await c.call("GET", V1 + "/collections")
    await c.call("GET", V1 + "/collections/{collection_id}", args={"collection_id": posts["id"]})
    await c.call("PATCH", V1 + "/collections/{collection_id}", admin_token, args={"collection_id": posts["id"]},
                 json={"list_rule": ""})
    await c.call("POST", V1 + "/collections", admin_token, json={
        "name": "members", "type": "auth", "schema": [{"name": "nickname", "type": "text"}],
        "otp_enabled": True, "mfa_enabled": True})

    # schema as code (a diff and an apply that change nothing: the routes below keep their rules)
    snapshot = await c.call("GET", V1 + "/schema", admin_token)
    diff = await c.call("POST", V1 + "/schema/diff", admin_token, json=snapshot)
    assert diff["changes"] == []
    await c.call("POST", V1 + "/schema/apply", admin_token, json={"hash": diff["hash"], "snapshot": snapshot})

    # both user systems, then what only one of them has
    await user_system(c, V1 + "/auth", {}, "person@example.com", clock, provider, run_jobs, mailbox)
    clock.advance(seconds=30)  # a new TOTP step for the second system's codes
    provider.user = type(provider.user)(sub="provider-subject-2", email="oidc.member@example.com")
    members = {"collection_name": "members"}
    member = await user_system(c, MEMBERS, members, "member@example.com", clock, provider, run_jobs, mailbox)
    await c.call("POST", MEMBERS + "/me/request-email-change", member, args=members,
                 json={"new_email": "member2@example.com", "password": NEW_PASSWORD})
    token = await mail_token(run_jobs, mailbox, "member2@example.com", "Confirm your new email address")
    await c.call("POST", MEMBERS + "/me/confirm-email-change", args=members, json={"token": token})
    await c.call("POST", MEMBERS + "/otp/request", args=members, json={"email": "member2@example.com"})
    await run_jobs()
    otp = re.search(r"^\s*(\d{6})\s*$", text_body(mail_with_subject(mailbox, "member2@example.com", "Your login code")),
                    re.MULTILINE)
    assert otp
    await c.call("POST", MEMBERS + "/otp/verify", args=members, json={"email": "member2@example.com", "code": otp[1]})
    await c.call("POST", V1 + "/auth/request-password-reset", json={"email": "person@example.com"})
    await c.call("POST", V1 + "/auth/forgot-password", json={"email": "person@example.com"})
    token = await mail_token(run_jobs, mailbox, "person@example.com", "Reset your password")
    await c.call("POST", V1 + "/auth/reset-password", json={"token": token, "new_password": PASSWORD})
    logout = await c.call("POST", V1 + "/auth/login", json={"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    await c.call("POST", V1 + "/auth/logout", logout["token"]["access_token"])

    # webhooks (with one delivery in the log), records, files
    hook = await make_webhook(client, admin_token, receiver.url, secret="s3cret")
    hook_args = {"webhook_id": hook["id"]}
    await c.call("POST", V1 + "/webhooks", admin_token, json={"url": receiver.url, "collection_name": "posts",
                                                             "events": ["delete"]})
    posts_args = {"collection_name": "posts"}
    record = await c.call("POST", RECORDS, admin_token, args=posts_args, json={"data": {"title": "a", "views": 1}})
    await run_jobs()
    record_args = {**posts_args, "record_id": record["id"]}
    await c.call("GET", RECORDS, args=posts_args)
    await c.call("GET", RECORDS + "/{record_id}", args=record_args)
    await c.call("PATCH", RECORDS + "/{record_id}", admin_token, args=record_args, json={"data": {"views": 2}})
    versions = await c.call("GET", RECORDS + "/{record_id}/versions", args=record_args)
    assert [v["version"] for v in versions["items"]] == [2, 1]
    await c.call("GET", RECORDS + "/{record_id}/versions/{version}", args={**record_args, "version": "1"})
    await c.call("POST", RECORDS + "/{record_id}/versions/{version}/restore", admin_token,
                 args={**record_args, "version": "1"})
    answers = await c.call("POST", V1 + "/batch", admin_token, json={"requests": [
        {"method": "POST", "url": "/api/v1/collections/posts/records", "body": {"data": {"title": "b"}}},
        {"method": "PATCH", "url": f"/api/v1/collections/posts/records/{record['id']}", "body": {"data": {"views": 3}}},
    ]})
    assert [a["status"] for a in answers] == [201, 200]
    await c.call("POST", RECORDS + "/bulk-update", admin_token, args=posts_args,
                 json={"record_ids": [record["id"]], "data": {"views": 3}})
    groups = await c.call("GET", V1 + "/collections/{collection_name}/aggregate", admin_token, args=posts_args,
                          params={"group_by": "title", "aggregates": "count(),sum(views),max(title)"})
    assert groups["total"] == 2 and groups["items"][0]["key"] == {"title": "a"}
    stats = await c.call("POST", V1 + "/collections", admin_token, json={
        "name": "stats", "type": "view", "view": {"source": "posts", "group_by": "title", "aggregates": "count()"}})
    assert stats["view"]["source"] == "posts" and [f["name"] for f in stats["schema"]["fields"]] == ["title", "count"]
    csv = aiohttp.FormData()
    csv.add_field("file", b"title,views\nb,1\n,x\n", filename="rows.csv", content_type="text/csv")
    imported = await c.call("POST", RECORDS + "/import/csv", admin_token, args=posts_args, data=csv)
    assert imported["imported"] == 1 and imported["failed"]
    upload = aiohttp.FormData()
    upload.add_field("collection", "posts")
    upload.add_field("record_id", record["id"])
    upload.add_field("file", b"hello", filename="hello.txt", content_type="text/plain")
    await c.call("POST", V1 + "/files", admin_token, data=upload)
    await c.call("POST", V1 + "/files/token", admin_token)
    await c.call("GET", V1 + "/webhooks", admin_token)
    await c.call("GET", V1 + "/webhooks/{webhook_id}", admin_token, args=hook_args)
    await c.call("PATCH", V1 + "/webhooks/{webhook_id}", admin_token, args=hook_args, json={"retry_count": 2})
    log = await c.call("GET", V1 + "/webhooks/{webhook_id}/deliveries", admin_token, args=hook_args)
    assert log["items"], "no delivery to check the shape of"
    await c.call("GET", V1 + "/webhooks/deliveries/recent", admin_token)
    await c.call("POST", V1 + "/webhooks/deliveries/{delivery_id}/redeliver", admin_token,
                 args={"delivery_id": log["items"][0]["id"]})
    await c.call("POST", RECORDS + "/bulk-delete", admin_token, args=posts_args, json={"record_ids": [record["id"]]})
    # a slow query (as the store reports one past SLOW_QUERY_MS), listed, its index created
    services.slow_query_watch.slow(posts["id"], shape_of({"views": {"$gte": 1}}), 250.0)
    await services.slow_query_watch.idle()
    (slow,) = await c.call("GET", V1 + "/slow-queries", admin_token)
    assert slow["suggested_index"] == {"fields": ["views"], "unique": False}
    await c.call("POST", V1 + "/slow-queries/{slow_query_id}/index", admin_token, args={"slow_query_id": slow["id"]})
    # drafts: a working copy, its publish (now and scheduled) and unpublish
    await c.call("POST", V1 + "/collections", admin_token, json={
        "name": "pages", "drafts": True, "schema": [{"name": "title", "type": "text"}]})
    page = await c.call("POST", RECORDS, admin_token, args={"collection_name": "pages"}, json={"data": {"title": "p"}})
    page_args = {"collection_name": "pages", "record_id": page["id"]}
    published = await c.call("POST", RECORDS + "/{record_id}/publish", admin_token, args=page_args)
    assert published["status"] == "published"
    scheduled = await c.call("POST", RECORDS + "/{record_id}/publish", admin_token, args=page_args,
                             json={"at": (clock() + timedelta(hours=1)).isoformat()})
    assert scheduled["scheduled_at"] is not None
    assert (await c.call("POST", RECORDS + "/{record_id}/unpublish", admin_token, args=page_args))["status"] == "draft"
    # releases: created, listed, read, changed, scheduled, published
    release = await c.call("POST", V1 + "/releases", admin_token, json={
        "name": "r", "items": [{"collection": "pages", "record_id": page["id"]}]})
    release_args = {"release_id": release["id"]}
    assert (await c.call("GET", V1 + "/releases", admin_token))["total"] == 1
    await c.call("GET", V1 + "/releases/{release_id}", admin_token, args=release_args)
    await c.call("PATCH", V1 + "/releases/{release_id}", admin_token, args=release_args, json={"name": "r2"})
    await c.call("POST", V1 + "/releases/{release_id}/publish", admin_token, args=release_args,
                 json={"at": (clock() + timedelta(hours=1)).isoformat()})
    released = await c.call("POST", V1 + "/releases/{release_id}/publish", admin_token, args=release_args)
    assert released["status"] == "published" and released["published_at"] is not None

    # API keys, audit, settings, health, backups
    await c.call("POST", V1 + "/api-keys", admin_token, json={"name": "ci", "scopes": ["read"]})
    await c.call("POST", V1 + "/api-keys", admin_token, json={
        "name": "expiring", "scopes": ["read", "write"], "expires_at": (clock() + timedelta(days=1)).isoformat()})
    assert len(await c.call("GET", V1 + "/api-keys", admin_token)) == 2
    assert (await c.call("GET", V1 + "/audit", admin_token))["items"]
    await c.call("GET", V1 + "/audit/security", admin_token)
    await c.call("GET", V1 + "/audit/statistics", admin_token)
    await c.call("GET", V1 + "/settings", admin_token)
    await c.call("POST", V1 + "/settings", admin_token, json={"key": "password_min_length", "value": "8"})
    await c.call("GET", "/health")
    await c.call("GET", V1 + "/health")
    backup = await c.call("POST", V1 + "/backups", admin_token)
    await c.call("GET", V1 + "/backups", admin_token)
    await c.call("POST", V1 + "/backups/{filename}/restore", admin_token, args={"filename": backup["filename"]})

    assert c.checked == DOCUMENTED, f"not called here: {sorted(DOCUMENTED - c.checked)}"


NOTES = [{"name": "title", "type": "text"}, {"name": "when", "type": "date"},
         {"name": "tags", "type": "select", "values": ["a", "b", "c"], "max_select": 3},
         {"name": "meta", "type": "json"}]


async def test_a_record_looks_the_same_wherever_it_is_shown(client, services, admin_token, run_jobs, seen,
                                                            mongo_commands, receiver):  # noqa: F811
    """One representation (cms/services/representation/records.py): the REST answers of a write,
    a view and a list, the reads the admin UI renders (`list_json`, `get_json`: the same cached
    entries, no query of their own), the record events and the webhook payloads all show the same
    `{id, created, updated, ...fields}`, and the payload's `data` is the document's `Record`."""
    document = await (await client.get("/openapi.json")).json()
    record_schema = {"$ref": "#/components/schemas/Record", "components": document["components"]}
    await create_collection(client, admin_token, "notes", NOTES, list_rule="", view_rule="")
    await make_webhook(client, admin_token, receiver.url, collection_name="notes")
    created = await create_record(client, admin_token, "notes", {
        "title": "ü", "when": "2024-03-01T10:30:00+01:00", "tags": ["b", "a"], "meta": {"k": [1, None]}})
    assert created["when"] == "2024-03-01T09:30:00.000Z" and created["created"].endswith("Z")
    changed = await client.patch(records_path("notes", created["id"]), headers=bearer(admin_token),
                                 json={"data": {"title": "second"}})
    assert changed.status == 200
    shown = await (await client.get(records_path("notes", created["id"]))).json()
    assert shown == await changed.json() == {**created, "title": "second", "updated": shown["updated"]}
    listing = await (await client.get(records_path("notes"))).json()
    assert listing["items"] == [shown]

    queries = await queries_of(services, mongo_commands, "notes")
    page = await services.records.list_json("notes")
    assert (page.items, page.total, page.page, page.per_page) == (listing["items"], 1, 1, listing["per_page"])
    assert await services.records.get_json("notes", created["id"]) == shown
    assert (queries.finds, queries.gets, queries.counts) == (0, 0, 0), "the admin UI's reads missed the cache"

    assert [(e.event, e.data) for e in seen] == [("create", created), ("update", shown)]
    await run_jobs()
    payloads = sorted(receiver.bodies(), key=lambda body: body["event"])
    assert [(p["event"], p["data"]) for p in payloads] == [("create", created), ("update", shown)]
    for payload in payloads:
        assert not list(OAS30Validator(record_schema).iter_errors(payload["data"]))
