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
        assert httpx.get(url).content == b"hello bytes"  # the posts collection is public to read
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
