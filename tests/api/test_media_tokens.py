"""File tokens for `protected` file fields (decisions.md, Files in records, thumbnails and file
tokens; issue 41): `POST /api/v1/files/token` answers `{token, expires}` valid 2 minutes for the
caller; `?token=` downloads as that caller with no header (an `<img>`); without a valid token a
protected file is 404 even with a header; another user's token, an expired one or one of a session
that ended is not valid."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.api.test_access_rules import customer
from tests.api.test_api_keys import api_key, make_key
from tests.api.test_files import FILES
from tests.api.test_media_fields import created_with_files, photo
from tests.conftest import bearer, create_collection, error_of

TOKEN = f"{FILES}/token"
OWNER_ONLY = 'owner = @request.auth.id'


async def file_token(client: Any, headers: dict[str, str]) -> str:
    response = await client.post(TOKEN, headers=headers)
    assert response.status == 200, await response.text()
    body = await response.json()
    assert set(body) == {"token", "expires"}
    token: str = body["token"]
    return token


@pytest.fixture
async def deeds(client, admin_token):
    """Ann's deed, with a scan in a protected field and a public picture; the view rule shows
    deeds to their owner only. ((ann id, headers), (bob id, headers), deed)."""
    await create_collection(client, admin_token, "customers", [], type="auth")
    ann = await customer(client, "customers", "ann@example.com")
    bob = await customer(client, "customers", "bob@example.com")
    await create_collection(client, admin_token, "deeds", [
        {"name": "owner", "type": "text"},
        {"name": "scan", "type": "file", "protected": True},
        {"name": "picture", "type": "file"}], view_rule=OWNER_ONLY, list_rule=OWNER_ONLY)
    deed = await created_with_files(client, admin_token, "deeds", {"owner": ann[0]},
                                    ("scan", "scan.pdf", b"%PDF-1.4 deed", "application/pdf"),
                                    ("picture", "p.jpg", photo((64, 48)), "image/jpeg"))
    return ann, bob, deed


async def test_a_token_is_two_minutes_long_and_needs_credentials(client, deeds, clock):
    (_, ann_auth), _, _ = deeds
    response = await client.post(TOKEN, headers=ann_auth)
    body = await response.json()
    expires = datetime.fromisoformat(body["expires"].replace("Z", "+00:00"))
    assert timedelta(seconds=119) <= expires - clock() <= timedelta(seconds=120)
    await error_of(await client.post(TOKEN), 401, "unauthorized")


async def test_a_protected_file_needs_a_token_of_its_caller(client, deeds, clock):
    (_, ann_auth), (_, bob_auth), deed = deeds
    scan = f"{FILES}/{deed['scan']}"
    assert (await client.get(scan, headers=ann_auth)).status == 404  # a header is not enough
    assert (await client.get(scan)).status == 404
    ann_token = await file_token(client, ann_auth)
    no_header: dict[str, str] = {}
    for headers in (no_header, ann_auth):  # an <img> sends no header
        response = await client.get(scan, params={"token": ann_token}, headers=headers)
        assert response.status == 200 and await response.read() == b"%PDF-1.4 deed"
        assert response.headers["Cache-Control"] == "private, no-cache"
    bob_token = await file_token(client, bob_auth)
    assert (await client.get(scan, params={"token": bob_token})).status == 404  # Bob may not see the deed
    assert (await client.get(scan, params={"token": bob_token}, headers=ann_auth)).status == 404
    assert (await client.get(scan, params={"token": ann_token + "x"})).status == 404
    picture = f"{FILES}/{deed['picture']}"
    assert (await client.get(picture, headers=ann_auth)).status == 200  # not protected: the header will do
    assert (await client.get(picture, params={"token": ann_token, "thumb": "100x100"})).status == 200
    assert (await client.get(picture, params={"token": bob_token})).status == 404
    clock.advance(seconds=121)
    assert (await client.get(scan, params={"token": ann_token})).status == 404


async def test_a_token_of_a_session_that_ended_is_not_valid(client, deeds):
    (_, ann_auth), _, deed = deeds
    token = await file_token(client, ann_auth)
    ended = await client.delete("/api/v1/collections/customers/auth/sessions/all", headers=ann_auth)
    assert ended.status in (200, 204), await ended.text()
    assert (await client.get(f"{FILES}/{deed['scan']}", params={"token": token})).status == 404


async def test_a_file_token_is_no_access_token_and_an_api_key_gets_one(client, deeds, admin_token):
    (_, ann_auth), _, deed = deeds
    token = await file_token(client, ann_auth)
    await error_of(await client.get("/api/v1/collections/customers/auth/me", headers=bearer(token)),
                   401, "unauthorized")
    key = await make_key(client, admin_token, ["read", "write"])
    key_token = await file_token(client, api_key(key))
    response = await client.get(f"{FILES}/{deed['scan']}", params={"token": key_token})
    assert response.status == 200 and await response.read() == b"%PDF-1.4 deed"
