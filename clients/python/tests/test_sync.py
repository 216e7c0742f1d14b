from __future__ import annotations

import importlib.util
import inspect
import queue
import threading
from pathlib import Path
from typing import get_type_hints

import httpx
import pytest
from conftest import Blog, Service, unique
from test_auth import expired_copy

import cms_client
from cms_client import CmsClient, CmsError, RealtimeEvent
from cms_client._generated import models
from cms_client.shapes import RecordPage

PACKAGE = Path(cms_client.__file__).resolve().parent
SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


def test_sync_client_records_batch_and_errors(service: Service, blog: Blog) -> None:
    tag = unique("sync")
    with CmsClient(service.url) as client:
        client.auth.auth_with_password(service.admin_email, service.admin_password)
        posts = client.collection(blog.posts)
        post = posts.create({"title": f"{tag} a", "views": 1})
        assert posts.get_one(post["id"])["title"] == f"{tag} a"
        assert posts.update(post["id"], {"views": 3})["views"] == 3
        batch = client.batch()
        batch.collection(blog.posts).create({"title": f"{tag} b"})
        answers = batch.collection(blog.posts).delete(post["id"]).send()
        assert [answer["status"] for answer in answers] == [201, 204]
        assert [r["title"] for r in posts.get_full_list(filter=f'title~"{tag}"')] == [f"{tag} b"]
        with pytest.raises(CmsError) as caught:
            posts.create({"views": "not a number"})
        assert caught.value.status == 422 and caught.value.errors


def test_sync_client_refreshes_once_for_concurrent_threads(service: Service) -> None:
    if service.secret_key is None:
        pytest.skip("minting an expired token needs CMS_SECRET_KEY")
    refreshes: list[int] = []

    def record(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/refresh"):
            refreshes.append(response.status_code)

    with CmsClient(service.url, http=httpx.Client(event_hooks={"response": [record]}),
                   refresh_margin_s=None) as client:
        client.auth.auth_with_password(service.admin_email, service.admin_password)
        store = client.auth_store
        store.save(expired_copy(store.token, service.secret_key), store.refresh_token)
        emails: list[str] = []
        threads = [threading.Thread(target=lambda: emails.append(client.auth.me()["email"])) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert emails == [service.admin_email] * 4
        assert refreshes == [200]
        client.auth.logout()
        assert store.token == ""


def _public_methods(cls: type) -> dict[str, list[str]]:
    return {name: list(inspect.signature(member).parameters) for name, member in inspect.getmembers(cls)
            if not name.startswith("_") and callable(member)}


@pytest.mark.parametrize("async_cls, sync_cls", [
    (cms_client.AsyncCollection, cms_client.SyncCollection),
    (cms_client.AsyncAuth, cms_client.SyncAuth),
    (cms_client.AsyncCollectionAuth, cms_client.SyncCollectionAuth),
    (cms_client.AsyncBatch, cms_client.SyncBatch),
    (cms_client.AsyncCollections, cms_client.SyncCollections),
    (cms_client.AsyncFiles, cms_client.SyncFiles),
    (cms_client.AsyncApiKeys, cms_client.SyncApiKeys),
    (cms_client.AsyncReleases, cms_client.SyncReleases),
    (cms_client.AsyncSchema, cms_client.SyncSchema),
    (cms_client.AsyncRealtime, cms_client.SyncRealtime),
], ids=["collection", "auth", "collection_auth", "batch", "collections", "files", "api_keys", "releases", "schema",
        "realtime"])
def test_sync_classes_mirror_the_async_ones(async_cls: type, sync_cls: type) -> None:
    assert _public_methods(sync_cls) == _public_methods(async_cls)


def test_committed_sync_module_is_the_rewrite_of_the_async_one() -> None:
    """`_sync.py` is generated (scripts/unasync_client.py): a hand edit, or an `_async.py` change without
    regenerating, fails here."""
    spec = importlib.util.spec_from_file_location("unasync_client", SCRIPTS / "unasync_client.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    source = (PACKAGE / "_async.py").read_text()
    assert (PACKAGE / "_sync.py").read_text() == generator.unasync(source), \
        "run `python scripts/unasync_client.py` and commit cms_client/_sync.py"
    assert "await " not in generator.unasync(source) and "async def" not in generator.unasync(source)


def test_client_classes_mirror_each_other() -> None:
    async_methods = _public_methods(cms_client.AsyncCmsClient)
    sync_methods = _public_methods(cms_client.CmsClient)
    assert set(async_methods) - {"aclose"} == set(sync_methods) - {"close"}


def _public_attributes(obj: object) -> dict[str, str]:
    """Public instance attributes -> their class's name without its flavour (`AsyncAuth`/`SyncAuth` -> `Auth`)."""
    return {name: type(value).__name__.removeprefix("Async").removeprefix("Sync")
            for name, value in vars(obj).items() if not name.startswith("_")}


@pytest.mark.anyio
async def test_client_objects_mirror_each_other_and_the_js_surface() -> None:
    """Both flavours hang the same objects at the same places as the TypeScript client: `client.auth` (the admin
    table), `client.collection(name)` (records) and `client.collection(name).auth` (that collection's users)."""
    async with cms_client.AsyncCmsClient("http://127.0.0.1:9") as async_client:
        with CmsClient("http://127.0.0.1:9") as sync_client:
            async_attributes = _public_attributes(async_client)
            assert async_attributes["realtime"] == "Realtime" and async_attributes["releases"] == "Releases"
            assert async_attributes == _public_attributes(sync_client)
            assert async_attributes["auth"] == "Auth" and "admins" not in async_attributes
            for collection in (async_client.collection("members"), sync_client.collection("members")):
                assert _public_attributes(collection) == {"name": "str", "auth": "CollectionAuth"}
                assert collection.auth.auth_path == "/api/v1/collections/members/auth"
                assert not hasattr(collection, "auth_with_password")  # sign-in is on `.auth` only
            assert not hasattr(async_client.auth, "auth_with_otp")  # the admin table has no emailed-code login


def test_record_page_has_the_generated_keys() -> None:
    assert set(get_type_hints(RecordPage)) == set(get_type_hints(models.RecordPage))


def test_sync_realtime_calls_back_in_its_thread_and_unsubscribes(service: Service, blog: Blog) -> None:
    tag = unique("sync live")
    events: queue.Queue[RealtimeEvent] = queue.Queue()
    threads: list[str] = []

    def on_event(event: RealtimeEvent) -> None:
        threads.append(threading.current_thread().name)
        events.put(event)

    with CmsClient(service.url) as writer, CmsClient(service.url) as client:
        writer.auth.auth_with_password(service.admin_email, service.admin_password)
        client.auth.auth_with_password(service.admin_email, service.admin_password)
        unsubscribe = client.realtime.subscribe(f"{blog.posts}/*", on_event, filter=f'title~"{tag}"')
        assert client.realtime.client_id
        post = writer.collection(blog.posts).create({"title": f"{tag} one"})
        writer.collection(blog.posts).update(post["id"], {"views": 2})
        first, second = events.get(timeout=15), events.get(timeout=15)
        assert [first["action"], second["action"]] == ["create", "update"]
        assert first["record"]["id"] == post["id"] and second["id"] != first["id"]
        assert first["topic"].startswith(f"{blog.posts}/*?filter=")
        assert set(threads) == {"cms-client-realtime"}
        unsubscribe()
        writer.collection(blog.posts).create({"title": f"{tag} after"})
        with pytest.raises(queue.Empty):
            events.get(timeout=1.0)
    assert not any(thread.name == "cms-client-realtime" for thread in threading.enumerate())
