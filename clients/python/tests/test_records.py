from __future__ import annotations

import httpx
import pytest
from conftest import Blog, Service, unique

from cms_client import AsyncCmsClient, CmsError, CmsNetworkError

pytestmark = pytest.mark.anyio


async def signed_in(service: Service) -> AsyncCmsClient:
    client = AsyncCmsClient(service.url)
    await client.auth.auth_with_password(service.admin_email, service.admin_password)
    return client


async def test_create_get_update_delete_with_expand_and_fields(service: Service, blog: Blog) -> None:
    async with await signed_in(service) as client:
        author = await client.collection(blog.authors).create({"name": "Ada"})
        posts = client.collection(blog.posts)
        post = await posts.create({"title": "Hello", "views": 1, "author": author["id"]}, expand="author")
        assert post["expand"]["author"]["name"] == "Ada"
        assert post["author"] == author["id"]

        got = await posts.get_one(post["id"], fields="id,title,expand.author.name", expand="author")
        assert got == {"id": post["id"], "title": "Hello", "expand": {"author": {"name": "Ada"}}}

        changed = await posts.update(post["id"], {"views": 2})
        assert changed["views"] == 2 and changed["title"] == "Hello"

        await posts.delete(post["id"])
        with pytest.raises(CmsError) as caught:
            await posts.get_one(post["id"])
        assert (caught.value.status, caught.value.code) == (404, "not_found")


async def test_get_list_filter_sort_search_and_full_list(service: Service, blog: Blog) -> None:
    tag = unique("t")
    async with await signed_in(service) as client:
        posts = client.collection(blog.posts)
        for views in range(5):
            await posts.create({"title": f"{tag} number {'zero one two three four'.split()[views]}", "views": views})
        page = await posts.get_list(1, 2, filter=f'title~"{tag}" && views>=1', sort="-views")
        assert (page["total"], page["page"], page["per_page"]) == (4, 1, 2)
        assert [item["views"] for item in page["items"]] == [4, 3]
        assert (await posts.get_list(2, 2, filter=f'title~"{tag}"', sort="views"))["items"][0]["views"] == 2

        found = await posts.get_list(search=f"{tag} number three")  # words no hex tag can contain
        assert [item["views"] for item in found["items"]] == [3]

        everything = await posts.get_full_list(filter=f'title~"{tag}"', sort="views", per_page=2)
        assert [item["views"] for item in everything] == [0, 1, 2, 3, 4]


async def test_bulk_update_and_bulk_delete(service: Service, blog: Blog) -> None:
    tag = unique("bulk")
    async with await signed_in(service) as client:
        posts = client.collection(blog.posts)
        ids = [(await posts.create({"title": f"{tag} {n}", "views": 0}))["id"] for n in range(3)]
        assert await posts.bulk_update(ids, {"views": 7}) == {"updated": 3}
        assert {r["views"] for r in await posts.get_full_list(filter=f'title~"{tag}"')} == {7}
        assert await posts.bulk_delete(ids[:2]) == {"deleted": 2}
        assert [r["id"] for r in await posts.get_full_list(filter=f'title~"{tag}"')] == ids[2:]


async def test_import_and_export_csv(service: Service, blog: Blog) -> None:
    tag = unique("csv")
    async with await signed_in(service) as client:
        posts = client.collection(blog.posts)
        result = await posts.import_csv(f"title,views\n{tag} a,1\n,2\n{tag} b,3\n")
        assert result["imported"] == 2
        assert [failure["row"] for failure in result["failed"]] == [2]
        text = await posts.export_csv(filter=f'title~"{tag}"', sort="views")
        lines = text.strip().splitlines()
        assert "title" in lines[0] and len(lines) == 3
        assert f"{tag} a" in lines[1] and f"{tag} b" in lines[2]


async def test_errors_are_typed(service: Service, blog: Blog) -> None:
    async with await signed_in(service) as client:
        posts = client.collection(blog.posts)
        with pytest.raises(CmsError) as caught:
            await posts.create({"title": "x" * 81, "unknown_field": 1})
        error = caught.value
        assert (error.status, error.code) == (422, "validation_error")
        assert error.detail and "title" in error.errors and isinstance(error.errors["title"], list)

        with pytest.raises(CmsError) as bad_filter:
            await posts.get_list(filter="title ==== 1")
        assert (bad_filter.value.status, bad_filter.value.code) == (400, "invalid_filter")

        with pytest.raises(CmsError) as missing:
            await client.collection(unique("nope")).get_list()
        assert missing.value.status == 404

    async with AsyncCmsClient(service.url) as anonymous:
        with pytest.raises(CmsError) as refused:
            await anonymous.collection(blog.posts).create({"title": "anonymous"})
        assert refused.value.status == 401


async def test_network_failure_is_not_a_cms_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with AsyncCmsClient(f"http://127.0.0.1:{port}") as client:
        with pytest.raises(CmsNetworkError):
            await client.health()


async def test_locale_reads_and_writes_localized_fields(service: Service) -> None:
    """decisions.md, Localized fields: `locale=` on writes, reads and the CSV export."""
    name = unique("pages")
    async with await signed_in(service) as client:
        token = client.auth_store.token
        answer = httpx.post(service.url + "/api/v1/settings", headers={"Authorization": f"Bearer {token}"},
                            timeout=30, json={"key": "locales",
                                              "value": '[{"code": "en"}, {"code": "de", "fallback": "en"}]'})
        answer.raise_for_status()
        await client.collections.create({"name": name,
                                         "schema": [{"name": "title", "type": "text", "localized": True}]})
        pages = client.collection(name)
        page = await pages.create({"title": {"en": "Hello"}}, locale="*")
        assert page["title"] == {"en": "Hello"}
        assert (await pages.get_one(page["id"], locale="de"))["title"] == "Hello"  # falls back to en
        changed = await pages.update(page["id"], {"title": "Hallo"}, locale="de")
        assert changed["title"] == "Hallo"
        listed = await pages.get_list(filter='title = "Hallo"', locale="de")
        assert [item["id"] for item in listed["items"]] == [page["id"]]
        assert (await pages.get_one(page["id"], locale="*"))["title"] == {"en": "Hello", "de": "Hallo"}
        assert "title:de" in (await pages.export_csv(locale="*")).splitlines()[0]
