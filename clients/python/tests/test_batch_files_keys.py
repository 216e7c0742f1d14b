from __future__ import annotations

import httpx
import pytest
from conftest import Blog, Service, unique

from cms_client import AsyncCmsClient, BatchError, CmsError

pytestmark = pytest.mark.anyio


async def test_batch_runs_all_requests_in_order(service: Service, blog: Blog) -> None:
    tag = unique("batch")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        author = await client.collection(blog.authors).create({"name": tag})
        kept = await client.collection(blog.posts).create({"title": f"{tag} old"})
        gone = await client.collection(blog.posts).create({"title": f"{tag} gone"})
        batch = client.batch()
        posts = batch.collection(blog.posts)
        assert posts.create({"title": f"{tag} new", "author": author["id"]}, expand="author",
                            fields="id,title,expand.author.name") is batch
        answers = await (batch.collection(blog.posts).update(kept["id"], {"views": 9})
                         .collection(blog.posts).delete(gone["id"])
                         .add({"method": "PATCH", "url": f"/api/v1/collections/{blog.authors}/records/{author['id']}",
                               "body": {"data": {"name": f"{tag} renamed"}}})
                         .send())
        assert [answer["status"] for answer in answers] == [201, 200, 204, 200]
        created, changed, renamed = answers[0]["body"], answers[1]["body"], answers[3]["body"]
        assert created is not None and set(created) == {"id", "title", "expand"}
        assert created["expand"]["author"] == {"name": tag}
        assert changed is not None and changed["views"] == 9 and answers[2]["body"] is None
        assert renamed is not None and renamed["name"] == f"{tag} renamed"


async def test_a_batch_failing_in_the_middle_stores_nothing(service: Service, blog: Blog) -> None:
    tag = unique("failing")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        batch = (client.batch().collection(blog.posts)
                 .create({"title": f"{tag} first"})
                 .collection(blog.posts).update("0" * 24, {"views": 1})
                 .collection(blog.posts).create({"title": f"{tag} third"}))
        with pytest.raises(BatchError) as caught:
            await batch.send()
        error = caught.value
        assert isinstance(error, CmsError) and (error.status, error.code) == (400, "bad_request")
        assert error.failed is not None and error.failed == error.body["failed"]
        assert error.failed["index"] == 1 and error.failed["status"] == 404
        assert (await client.collection(blog.posts).get_list(filter=f'title~"{tag}"'))["total"] == 0


async def test_files_upload_url_download_delete(service: Service, blog: Blog) -> None:
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        post = await client.collection(blog.posts).create({"title": unique("with file")})
        uploaded = await client.files.upload(blog.posts, post["id"], b"hello bytes", "hello.txt", "text/plain")
        assert (uploaded["size"], uploaded["filename"], uploaded["record_id"]) == (11, "hello.txt", post["id"])
        assert await client.files.download(uploaded["id"]) == b"hello bytes"
        url = client.files.url(uploaded["id"])
        assert httpx.get(url, timeout=30).content == b"hello bytes"  # the posts collection is public to read
        await client.files.delete(uploaded["id"])
        with pytest.raises(CmsError) as caught:
            await client.files.download(uploaded["id"])
        assert caught.value.status == 404


async def test_api_keys_create_list_authenticate_delete(service: Service, blog: Blog) -> None:
    name = unique("key")
    async with AsyncCmsClient(service.url) as admin:
        await admin.auth.auth_with_password(service.admin_email, service.admin_password)
        created = await admin.api_keys.create(name, ["read", "write"])
        assert created["key"].startswith("cms_")
        listed = {key["name"]: key for key in await admin.api_keys.list()}
        assert name in listed and "key" not in listed[name]

        async with AsyncCmsClient(service.url, api_key=created["key"]) as robot:
            record = await robot.collection(blog.posts).create({"title": f"{name} by key"})
            assert (await robot.collection(blog.posts).get_one(record["id"]))["title"] == f"{name} by key"
            await admin.api_keys.delete(created["id"])
            with pytest.raises(CmsError) as caught:
                await robot.collection(blog.posts).create({"title": "after revocation"})
            assert caught.value.status == 401
        assert name not in {key["name"] for key in await admin.api_keys.list()}


PNG = bytes.fromhex(  # a 1x1 PNG
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63fccfc0500f0004"
    "85018084a98c210000000049454e44ae426082")


async def test_records_are_written_with_their_files_and_a_protected_one_needs_a_token(service: Service) -> None:
    name = unique("albums")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        await client.collections.create({"name": name, "schema": [
            {"name": "title", "type": "text"}, {"name": "cover", "type": "file", "mime_types": ["image/*"]},
            {"name": "pages", "type": "file", "max_select": 5, "protected": True}]})
        albums = client.collection(name)
        album = await albums.create({"title": "holidays"}, files={
            "cover": ("cover.png", PNG, "image/png"),
            "pages": [("1.txt", b"one", "text/plain"), ("2.txt", b"two", "text/plain")]})
        assert album["title"] == "holidays" and len(album["pages"]) == 2
        assert await client.files.download(album["cover"]) == PNG
        first, second = album["pages"]
        changed = await albums.update(album["id"], {"pages-": [first]},
                                      files={"pages+": ("3.txt", b"three", "text/plain")})
        assert changed["pages"][0] == second and len(changed["pages"]) == 2
        with pytest.raises(CmsError) as refused:
            await albums.create({"title": "bad"}, files={"cover": ("fake.png", b"not a png", "image/png")})
        assert refused.value.status == 422 and "cover" in (refused.value.errors or {})
        loose = await client.files.upload(name, album["id"], b"four", "4.txt", "text/plain", field="pages")
        assert loose["field"] == "pages"
        url = client.files.url(second)
        assert httpx.get(url, timeout=30).status_code == 404  # protected: a file token is needed
        token = await client.files.token()
        assert set(token) == {"token", "expires"}
        assert httpx.get(url, params={"token": token["token"]}, timeout=30).content == b"two"
        thumb = httpx.get(client.files.url(album["cover"]), params={"thumb": "100x100", "format": "webp"},
                          timeout=30)
        assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/webp"
