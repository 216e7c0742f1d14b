"""Drafts, publishing (now, by locale, on a schedule), versions, releases and schema as code through the client
(decisions.md, Drafts, versions and scheduled publishing; Localized fields; Schema as code)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from conftest import Service, unique

from cms_client import AsyncCmsClient, CmsClient, CmsError

pytestmark = pytest.mark.anyio

LOCALES = '[{"code": "en"}, {"code": "de", "fallback": "en"}]'


async def admin(service: Service) -> AsyncCmsClient:
    client = AsyncCmsClient(service.url)
    await client.auth.auth_with_password(service.admin_email, service.admin_password)
    return client


async def poll(read: Any, timeout_s: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await read()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


async def test_drafts_publish_unpublish_and_discard(service: Service) -> None:
    name = unique("articles")
    async with await admin(service) as client:
        await client.collections.create({"name": name, "drafts": True, "list_rule": "", "view_rule": "",
                                         "schema": [{"name": "title", "type": "text"}]})
        articles = client.collection(name)
        draft = await articles.create({"title": "first take"})
        assert draft["status"] == "draft"
        async with AsyncCmsClient(service.url) as reader:
            with pytest.raises(CmsError) as hidden:
                await reader.collection(name).get_one(draft["id"])
            assert hidden.value.status == 404
            assert (await articles.get_one(draft["id"], draft=True))["title"] == "first take"
            assert [r["id"] for r in await articles.get_full_list(draft=True)] == [draft["id"]]

            published = await articles.publish(draft["id"])
            assert published["status"] == "published" and published["published_at"]
            assert (await reader.collection(name).get_one(draft["id"]))["title"] == "first take"

            await articles.update(draft["id"], {"title": "second take"})
            assert (await reader.collection(name).get_one(draft["id"]))["title"] == "first take"
            assert (await articles.get_list(draft=True))["items"][0]["title"] == "second take"
            assert (await articles.get_first_list_item('title = "second take"', draft=True))["status"] == "changed"
            await articles.discard_draft(draft["id"])
            assert (await articles.get_one(draft["id"], draft=True))["title"] == "first take"
            with pytest.raises(CmsError) as none_left:
                await articles.discard_draft(draft["id"])
            assert none_left.value.status == 404
            with pytest.raises(CmsError) as refused:
                await reader.collection(name).get_one(draft["id"], draft=True)
            assert refused.value.status == 401

            assert (await articles.unpublish(draft["id"]))["status"] == "draft"
            with pytest.raises(CmsError):
                await reader.collection(name).get_one(draft["id"])


async def test_publish_by_schedule_and_cancel(service: Service) -> None:
    name = unique("scheduled")
    async with await admin(service) as client:
        await client.collections.create({"name": name, "drafts": True,
                                         "schema": [{"name": "title", "type": "text"}]})
        posts = client.collection(name)
        soon = await posts.create({"title": "soon"})
        later = await posts.create({"title": "later"})
        at = datetime.now(UTC) + timedelta(seconds=2)
        scheduled = await posts.publish(soon["id"], at=at)
        assert scheduled["scheduled_at"] and scheduled["status"] == "draft"
        far = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        assert (await posts.publish(later["id"], at=far))["scheduled_at"]
        await posts.cancel_schedule(later["id"])
        assert (await posts.get_one(later["id"], draft=True))["scheduled_at"] is None
        with pytest.raises(CmsError) as past:
            await posts.publish(later["id"], at=datetime.now(UTC) - timedelta(minutes=1))
        assert past.value.status == 422

        async def published() -> bool:
            return bool((await posts.get_one(soon["id"], draft=True))["status"] == "published")

        await poll(published, what="the scheduled publish")
        assert datetime.now(UTC) >= at
        assert (await posts.get_one(later["id"], draft=True))["status"] == "draft"


async def test_publish_one_locale(service: Service) -> None:
    name = unique("guides")
    async with await admin(service) as client:
        answer = httpx.post(service.url + "/api/v1/settings", timeout=30, json={"key": "locales", "value": LOCALES},
                            headers={"Authorization": f"Bearer {client.auth_store.token}"})
        answer.raise_for_status()
        await client.collections.create({"name": name, "drafts": True, "schema": [
            {"name": "title", "type": "text", "localized": True}]})
        guides = client.collection(name)
        guide = await guides.create({"title": {"en": "Hello", "de": "Hallo"}}, locale="*")
        await guides.publish(guide["id"])
        await guides.update(guide["id"], {"title": {"en": "Hello again", "de": "Hallo wieder"}}, locale="*")
        await guides.publish(guide["id"], locale="de")
        assert (await guides.get_one(guide["id"], locale="*"))["title"] == {"en": "Hello", "de": "Hallo wieder"}
        assert (await guides.get_one(guide["id"], locale="de"))["title"] == "Hallo wieder"


async def test_versions_list_get_and_restore(service: Service) -> None:
    name = unique("versioned")
    async with await admin(service) as client:
        await client.collections.create({"name": name, "versions": 5,
                                         "schema": [{"name": "title", "type": "text"}]})
        notes = client.collection(name)
        note = await notes.create({"title": "v1"})
        await notes.update(note["id"], {"title": "v2"})
        await notes.update(note["id"], {"title": "v3"})
        page = await notes.list_versions(note["id"], per_page=2)
        assert page["total"] == 3 and [v["version"] for v in page["items"]] == [3, 2]
        assert [v["version"] for v in (await notes.list_versions(note["id"], 2, 2))["items"]] == [1]
        first = await notes.get_version(note["id"], 1)
        assert first["data"]["title"] == "v1" and first["by"] == client.auth_store.record["id"]  # type: ignore[index]
        restored = await notes.restore_version(note["id"], 1)
        assert restored["title"] == "v1" and (await notes.get_one(note["id"]))["title"] == "v1"
        with pytest.raises(CmsError) as missing:
            await notes.get_version(note["id"], 99)
        assert missing.value.status == 404
    with CmsClient(service.url) as sync_client:
        sync_client.auth.auth_with_password(service.admin_email, service.admin_password)
        assert sync_client.collection(name).list_versions(note["id"])["total"] == 4


async def test_schema_export_diff_and_apply(service: Service) -> None:
    name = unique("schemad")
    async with await admin(service) as client:
        await client.collections.create({"name": name, "schema": [{"name": "title", "type": "text"}]})
        snapshot = await client.schema.export()
        assert snapshot["format"] == 1 and len(snapshot["hash"]) == 64
        assert (await client.schema.diff(snapshot))["changes"] == []
        mine = next(c for c in snapshot["collections"] if c["name"] == name)
        mine["schema"]["fields"].append({"name": "summary", "type": "text"})
        diff = await client.schema.diff(snapshot)
        assert [(c["op"], c["collection"], c["field"], c["data_loss"]) for c in diff["changes"]] == [
            ("create", name, "summary", False)]
        with pytest.raises(CmsError) as stale:
            await client.schema.apply(snapshot, hash="0" * 64)
        assert stale.value.status == 409
        applied = await client.schema.apply(snapshot, hash=diff["hash"])
        assert applied["hash"] != snapshot["hash"]
        collection = next(c for c in applied["collections"] if c["name"] == name)
        assert [f["name"] for f in collection["schema"]["fields"]] == ["title", "summary"]
        mine["schema"]["fields"].pop()  # dropping the field loses data: refused unless allowed
        with pytest.raises(CmsError) as lossy:
            await client.schema.apply(snapshot)
        assert lossy.value.status == 422
        after = await client.schema.apply(snapshot, allow_data_loss=True)
        fields = next(c for c in after["collections"] if c["name"] == name)["schema"]["fields"]
        assert [f["name"] for f in fields] == ["title"]


async def test_releases_publish_several_records_at_once(service: Service) -> None:
    name = unique("launch")
    async with await admin(service) as client:
        await client.collections.create({"name": name, "drafts": True, "schema": [
            {"name": "title", "type": "text", "validation": {"required": True}}]})
        pages = client.collection(name)
        one, two = await pages.create({"title": "one"}), await pages.create({"title": "two"})
        release = await client.releases.create(unique("release"), [{"collection": name, "record_id": one["id"]},
                                                                   {"collection": name, "record_id": two["id"]}])
        assert release["status"] == "pending" and [i["record_id"] for i in release["items"]] == [one["id"], two["id"]]
        assert (await client.releases.get_one(release["id"]))["name"] == release["name"]
        listed = await client.releases.list(per_page=100)
        assert release["id"] in {r["id"] for r in listed["items"]} and listed["total"] >= 1
        assert (await client.releases.update(release["id"], {"name": "renamed"}))["name"] == "renamed"
        scheduled = await client.releases.publish(release["id"], at=datetime.now(UTC) + timedelta(days=1))
        assert scheduled["status"] == "scheduled" and scheduled["scheduled_at"]
        await client.releases.cancel_schedule(release["id"])
        assert (await client.releases.get_one(release["id"]))["scheduled_at"] is None
        with pytest.raises(CmsError) as no_schedule:
            await client.releases.cancel_schedule(release["id"])
        assert no_schedule.value.status == 404

        await pages.update(two["id"], {"title": ""})  # invalid at publish: nothing is published
        with pytest.raises(CmsError) as invalid:
            await client.releases.publish(release["id"])
        assert invalid.value.status == 422 and "items.1" in invalid.value.errors
        assert {r["status"] for r in await pages.get_full_list(draft=True)} == {"draft"}
        await pages.update(two["id"], {"title": "two, fixed"})
        assert (await client.releases.publish(release["id"]))["status"] == "published"
        assert {r["status"] for r in await pages.get_full_list(draft=True)} == {"published"}
        with pytest.raises(CmsError) as done:
            await client.releases.update(release["id"], {"name": "too late"})
        assert done.value.status == 409
        await client.releases.delete(release["id"])
        with pytest.raises(CmsError) as gone:
            await client.releases.get_one(release["id"])
        assert gone.value.status == 404
    with CmsClient(service.url) as sync_client:
        sync_client.auth.auth_with_password(service.admin_email, service.admin_password)
        assert release["id"] not in {r["id"] for r in sync_client.releases.list(per_page=100)["items"]}
