from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import Blog, Service, unique

from cms_client import AsyncCmsClient, RealtimeEvent
from cms_client.realtime import topic_string

pytestmark = pytest.mark.anyio


async def eventually(predicate: Any, timeout_s: float = 15.0, what: str = "events") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


class Proxy:
    """A TCP relay in front of the server whose connections the test can cut (and refuse while down)."""

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.up = True
        self.transports: set[asyncio.WriteTransport] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        self.transports |= {writer.transport, up_writer.transport}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()

    def cut(self) -> None:
        self.up = False
        for transport in self.transports:
            transport.abort()
        self.transports.clear()

    async def close(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def test_subscribe_receives_events_with_filter_and_expand(service: Service, blog: Blog) -> None:
    tag = unique("live")
    async with AsyncCmsClient(service.url) as writer, AsyncCmsClient(service.url) as client:
        await writer.auth.auth_with_password(service.admin_email, service.admin_password)
        author = await writer.collection(blog.authors).create({"name": tag})
        events: list[RealtimeEvent] = []
        unsubscribe = await client.realtime.subscribe(f"{blog.posts}/*", events.append, filter=f'title~"{tag}"',
                                                      expand="author")
        assert client.realtime.client_id
        other = await writer.collection(blog.posts).create({"title": "not matching"})
        post = await writer.collection(blog.posts).create({"title": f"{tag} one", "author": author["id"]})
        await writer.collection(blog.posts).update(post["id"], {"views": 5})
        await writer.collection(blog.posts).delete(post["id"])
        await eventually(lambda: len(events) >= 3)
        assert [event["action"] for event in events] == ["create", "update", "delete"]
        assert events[0]["record"]["expand"]["author"]["name"] == tag
        assert other["id"] not in {event["record"]["id"] for event in events}

        by_id: list[RealtimeEvent] = []
        stop_one = await client.realtime.subscribe(f"{blog.posts}/{other['id']}", by_id.append)
        await unsubscribe()
        await writer.collection(blog.posts).create({"title": f"{tag} after unsubscribe"})
        await writer.collection(blog.posts).update(other["id"], {"views": 1})
        await eventually(lambda: len(by_id) == 1)
        assert len(events) == 3  # the unsubscribed topic got nothing, though a later event arrived
        await stop_one()


async def test_a_write_matching_two_topics_reaches_each_once(service: Service, blog: Blog) -> None:
    """Two topics matching one write: the service sends it once per topic under one id; each topic's
    callbacks get it once. The filter holds spaces, encoded as `%20` (as the JS client does), never `+`."""
    tag = unique("two topics")
    async with AsyncCmsClient(service.url) as writer, AsyncCmsClient(service.url) as client:
        await writer.auth.auth_with_password(service.admin_email, service.admin_password)
        every: list[RealtimeEvent] = []
        matching: list[RealtimeEvent] = []
        await client.realtime.subscribe(f"{blog.posts}/*", every.append)
        await client.realtime.subscribe(f"{blog.posts}/*", matching.append, filter=f'title ~ "{tag}"')
        post = await writer.collection(blog.posts).create({"title": f"{tag} one"})
        await writer.collection(blog.posts).create({"title": "another"})
        await eventually(lambda: len(every) >= 2 and len(matching) >= 1)
        await asyncio.sleep(0.3)  # a repeat would have arrived by now
        assert [event["record"]["id"] for event in matching] == [post["id"]]
        assert [event["record"]["id"] for event in every][0] == post["id"]
        assert len(every) == 2
        await client.realtime.close()


def test_topic_string_encodes_spaces_as_percent_20() -> None:
    assert topic_string("posts/*", filter='title ~ "a b"') == "posts/*?filter=title%20~%20%22a%20b%22"
    assert topic_string("posts/*", fields="id,title") == "posts/*?fields=id%2Ctitle"


async def test_resume_after_a_dropped_connection_loses_and_repeats_nothing(service: Service, blog: Blog) -> None:
    tag = unique("resume")
    proxy = Proxy(service.url)
    url = await proxy.start()
    try:
        async with AsyncCmsClient(service.url) as writer, AsyncCmsClient(url) as client:
            await writer.auth.auth_with_password(service.admin_email, service.admin_password)
            posts = writer.collection(blog.posts)
            titles: list[str] = []
            resyncs: list[bool] = []
            client.realtime.on_resync(lambda: resyncs.append(True))
            await client.realtime.subscribe(f"{blog.posts}/*", lambda e: titles.append(e["record"]["title"]),
                                            filter=f'title~"{tag}"')
            first_id = client.realtime.client_id
            await posts.create({"title": f"{tag} 1"})
            await eventually(lambda: titles == [f"{tag} 1"])

            proxy.cut()  # the stream drops; reconnection attempts are refused while down
            for n in (2, 3, 4):
                await posts.create({"title": f"{tag} {n}"})
            await asyncio.sleep(0.5)
            assert titles == [f"{tag} 1"]
            proxy.up = True

            await eventually(lambda: len(titles) >= 4, what="the missed events")
            await posts.create({"title": f"{tag} 5"})
            await eventually(lambda: len(titles) >= 5)
            await asyncio.sleep(0.3)
            assert titles == [f"{tag} {n}" for n in (1, 2, 3, 4, 5)]
            assert client.realtime.client_id == first_id and resyncs == []
    finally:
        await proxy.close()


async def test_subscriptions_are_posted_again_after_a_token_refresh(service: Service, blog: Blog) -> None:
    posted: list[str] = []

    async def record(request: httpx.Request) -> None:
        if request.method == "POST" and request.url.path == "/api/v1/realtime":
            posted.append(request.headers.get("Authorization", ""))

    tag = unique("refresh")
    http = httpx.AsyncClient(event_hooks={"request": [record]})
    async with AsyncCmsClient(service.url, http=http) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        titles: list[str] = []
        await client.realtime.subscribe(f"{blog.posts}/*", lambda e: titles.append(e["record"]["title"]),
                                        filter=f'title~"{tag}"')
        assert posted == [f"Bearer {client.auth_store.token}"]
        await client.refresh()
        await eventually(lambda: len(posted) == 2, what="the subscriptions posted again")
        assert posted[1] == f"Bearer {client.auth_store.token}" != posted[0]
        await client.collection(blog.posts).create({"title": f"{tag} after refresh"})
        await eventually(lambda: titles == [f"{tag} after refresh"])
    await http.aclose()


async def test_a_login_as_another_user_and_a_logout_move_the_subscriptions_to_a_new_stream(service: Service) -> None:
    members, notes = unique("members"), unique("notes")
    rule = 'owner = @request.auth.id || owner = "all"'
    answers: list[int] = []

    async def record(response: httpx.Response) -> None:
        if response.request.method == "POST" and response.request.url.path == "/api/v1/realtime":
            answers.append(response.status_code)

    http = httpx.AsyncClient(event_hooks={"response": [record]})
    async with AsyncCmsClient(service.url) as writer, AsyncCmsClient(service.url, http=http) as client:
        await writer.auth.auth_with_password(service.admin_email, service.admin_password)
        await writer.collections.create({"name": members, "type": "auth", "schema": []})
        await writer.collections.create({"name": notes, "list_rule": rule, "view_rule": rule, "schema": [
            {"name": "title", "type": "text"}, {"name": "owner", "type": "text"}]})
        users: dict[str, dict[str, str]] = {}
        for who in ("ann", "bob"):
            email = f"{unique(who)}@example.com"
            registered = await client.collection(members).auth.register(email, "secret-pass-1")
            users[who] = {"email": email, "id": registered["user"]["id"]}
        resyncs: list[bool] = []
        client.realtime.on_resync(lambda: resyncs.append(True))
        titles: list[str] = []
        extra: list[str] = []

        async def sign_in(who: str) -> None:
            await client.collection(members).auth.auth_with_password(users[who]["email"], "secret-pass-1")

        async def round_of(label: str) -> list[str]:
            """One note for ann, one for bob, one for all; waits for the last (events come in order)."""
            for owner in ("ann", "bob", "all"):
                await writer.collection(notes).create({"title": f"{label} {owner}",
                                                       "owner": users[owner]["id"] if owner in users else "all"})
            await eventually(lambda: f"{label} all" in titles, what=f"the events of round {label}")
            return [title for title in titles if title.startswith(f"{label} ")]

        await sign_in("ann")
        await client.realtime.subscribe(f"{notes}/*", lambda e: titles.append(e["record"]["title"]))
        ann_client_id = client.realtime.client_id
        assert await round_of("1") == ["1 ann", "1 all"]

        await sign_in("bob")
        # subscribing while the client id is still ann's: the refused re-post does not reach the caller
        await client.realtime.subscribe(f"{notes}/*", lambda e: extra.append(e["record"]["title"]))
        await eventually(lambda: len(resyncs) == 1, what="on_resync after the move to bob")
        bob_client_id = client.realtime.client_id
        assert bob_client_id and bob_client_id != ann_client_id
        assert await round_of("2") == ["2 bob", "2 all"]
        assert extra == ["2 bob", "2 all"]

        await client.collection(members).auth.logout()
        await eventually(lambda: len(resyncs) == 2, what="on_resync after the logout")
        assert client.realtime.client_id not in (None, bob_client_id)
        assert await round_of("3") == ["3 all"]
        assert 403 in answers  # the service refused a re-post on the old client id
    await http.aclose()


async def test_events_carry_topic_and_id_and_unsubscribe_by_topic(service: Service, blog: Blog) -> None:
    """An event is `{topic, id, action, record}`; `unsubscribe(topic)` drops that topic (with every filter) and
    keeps the others; `unsubscribe()` drops all and closes the stream."""
    tag = unique("unsub")
    async with AsyncCmsClient(service.url) as writer, AsyncCmsClient(service.url) as client:
        await writer.auth.auth_with_password(service.admin_email, service.admin_password)
        posts: list[RealtimeEvent] = []
        filtered: list[RealtimeEvent] = []
        authors: list[RealtimeEvent] = []
        await client.realtime.subscribe(f"{blog.posts}/*", posts.append)
        await client.realtime.subscribe(f"{blog.posts}/*", filtered.append, filter=f'title~"{tag}"')
        await client.realtime.subscribe(f"{blog.authors}/*", authors.append)
        post = await writer.collection(blog.posts).create({"title": f"{tag} 1"})
        await eventually(lambda: len(posts) == 1 and len(filtered) == 1)
        assert set(posts[0]) == {"topic", "id", "action", "record"}
        assert posts[0]["topic"] == f"{blog.posts}/*" and posts[0]["action"] == "create"
        assert posts[0]["record"]["id"] == post["id"] and posts[0]["id"]
        assert filtered[0]["topic"] == topic_string(f"{blog.posts}/*", filter=f'title~"{tag}"')

        await client.realtime.unsubscribe(f"{blog.posts}/*")
        await writer.collection(blog.posts).create({"title": f"{tag} 2"})
        author = await writer.collection(blog.authors).create({"name": tag})
        await eventually(lambda: len(authors) == 1)
        assert authors[0]["record"]["id"] == author["id"]
        assert len(posts) == 1 and len(filtered) == 1  # the posts' event came before the author's, had it come

        await client.realtime.unsubscribe()
        assert client.realtime.client_id is None
        await writer.collection(blog.authors).create({"name": f"{tag} after"})
        await asyncio.sleep(0.5)
        assert len(authors) == 1
