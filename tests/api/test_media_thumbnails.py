"""Thumbnails (decisions.md, Files in records, thumbnails and file tokens; issue 41): PocketBase's six
modes in webp, avif, png and jpeg, sizes limited to `100x100` and the field's `thumbs`, EXIF
orientation applied and metadata dropped, SVG never rasterised, kept in GridFS and deleted with their
file, and made once for 50 concurrent first requests on two replicas (counted by the replicas'
`cms_thumbnails_total{outcome="generated"}`)."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PIL import Image

from cms.app import create_app
from cms.config import Config
from cms.wiring import open_services
from tests.api.test_files import FILES
from tests.api.test_media_fields import created_with_files, photo, photos
from tests.api.test_record_writes import stored
from tests.conftest import bearer, create_collection, error_of

SVG = (b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><script>alert(document.cookie)</script>'
       b'<rect width="10" height="10"/></svg>')


def two_tone(size: tuple[int, int], fmt: str = "PNG", *, split: str = "rows", **save: Any) -> bytes:
    """An image red in its first half (top rows, or left columns) and blue in the other."""
    image = Image.new("RGB", size, (0, 0, 255))
    w, h = size
    image.paste((255, 0, 0), (0, 0, w, h // 2) if split == "rows" else (0, 0, w // 2, h))
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


def rgb(image: Image.Image, x: int, y: int) -> tuple[int, int, int]:
    """The colour of one pixel."""
    r, g, b = image.convert("RGB").getpixel((x, y))  # type: ignore[misc]
    return r, g, b


async def thumbnail(client: Any, file_id: str, thumb: str, **params: str) -> tuple[Image.Image, Any]:
    response = await client.get(f"{FILES}/{file_id}", params={"thumb": thumb, **params})
    assert response.status == 200, await response.text()
    image = Image.open(io.BytesIO(await response.read()))
    image.load()
    return image, response


async def with_cover(client: Any, token: str, content: bytes, filename: str = "c.jpg",
                     content_type: str = "image/jpeg", field: str = "cover") -> str:
    record = await created_with_files(client, token, "photos", {"title": "t"}, (field, filename, content, content_type))
    file_id: str = record[field]
    return file_id


async def test_sizes_modes_and_formats(client, admin_token):
    await photos(client, admin_token)
    await create_collection(client, admin_token, "wide", [
        {"name": "pic", "type": "file", "thumbs": ["100x100t", "100x100b", "100x100f", "0x50", "50x0"]}])
    tall = await with_cover(client, admin_token, two_tone((200, 400), "WEBP", lossless=True), "tall.webp", "image/webp")
    crop, response = await thumbnail(client, tall, "100x100")
    assert (crop.format, crop.size, response.headers["Content-Type"]) == ("WEBP", (100, 100), "image/webp")
    assert response.headers["Content-Disposition"].startswith('inline; filename="tall_100x100.webp"')
    for fmt, pillow_name in [("png", "PNG"), ("jpeg", "JPEG"), ("avif", "AVIF"), ("webp", "WEBP")]:
        image, response = await thumbnail(client, tall, "100x100", format=fmt)
        assert (image.format, image.size) == (pillow_name, (100, 100))
        assert response.headers["Content-Type"] == f"image/{fmt}"
    fitted, _ = await thumbnail(client, tall, "50x50f")
    assert fitted.size == (25, 50)
    ratio, _ = await thumbnail(client, tall, "640x0")
    assert ratio.size == (640, 1280)

    pic = await created_with_files(client, admin_token, "wide", None,
                                   ("pic", "p.png", two_tone((100, 300)), "image/png"))
    top, _ = await thumbnail(client, pic["pic"], "100x100t")
    bottom, _ = await thumbnail(client, pic["pic"], "100x100b")
    centre, _ = await thumbnail(client, pic["pic"], "100x100")
    assert top.convert("RGB").getpixel((50, 50)) == (255, 0, 0)
    assert bottom.convert("RGB").getpixel((50, 50)) == (0, 0, 255)
    assert rgb(centre, 50, 10)[0] > 200 and rgb(centre, 50, 90)[2] > 200
    assert (await thumbnail(client, pic["pic"], "100x100f"))[0].size == (33, 100)
    assert (await thumbnail(client, pic["pic"], "0x50"))[0].size == (17, 50)
    assert (await thumbnail(client, pic["pic"], "50x0"))[0].size == (50, 150)


async def test_sizes_and_formats_not_allowed_are_400_naming_the_allowed_ones(client, admin_token):
    await photos(client, admin_token)
    cover = await with_cover(client, admin_token, photo())
    for thumb in ("0x0", "99999x1", "200x200", "640x0f", "100X100", "100x100x"):
        response = await client.get(f"{FILES}/{cover}", params={"thumb": thumb})
        body = await error_of(response, 400, "bad_request")
        assert "allowed: 100x100, 640x0, 50x50f" in body["detail"], body
    response = await client.get(f"{FILES}/{cover}", params={"thumb": "100x100", "format": "gif"})
    body = await error_of(response, 400, "bad_request")
    assert "supported: webp, avif, png, jpeg" in body["detail"]


async def test_exif_orientation_is_applied_and_metadata_dropped(client, admin_token):
    await photos(client, admin_token)
    source = Image.open(io.BytesIO(two_tone((400, 200), "JPEG", split="columns", quality=95)))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view: the left (red) half shows on top
    exif[0x010F] = "Camera maker"
    out = io.BytesIO()
    source.save(out, "JPEG", exif=exif.tobytes(), icc_profile=b"\0" * 128, quality=95,
                comment=b"a comment")
    cover = await with_cover(client, admin_token, out.getvalue())
    upright, _ = await thumbnail(client, cover, "640x0", format="png")
    assert upright.size == (640, 1280)
    red, blue = rgb(upright, 320, 100), rgb(upright, 320, 1180)
    assert red[0] > 200 > red[2] and blue[2] > 200 > blue[0], (red, blue)
    for fmt in ("jpeg", "webp", "png", "avif"):
        image, response = await thumbnail(client, cover, "100x100", format=fmt)
        data = await response.read()
        assert not image.getexif() and "icc_profile" not in image.info and "exif" not in image.info, fmt
        assert b"Camera maker" not in data and b"a comment" not in data, fmt


async def test_an_svg_is_never_rasterised_and_other_files_answer_themselves(client, admin_token):
    await create_collection(client, admin_token, "docs", [{"name": "att", "type": "file", "max_select": 3}])
    record = await created_with_files(client, admin_token, "docs", None, ("att", "x.svg", SVG, "image/svg+xml"),
                                      ("att", "d.pdf", b"%PDF-1.4 doc", "application/pdf"))
    svg, pdf = record["att"][:2]
    response = await client.get(f"{FILES}/{svg}", params={"thumb": "100x100"})
    assert response.status == 200 and await response.read() == SVG
    assert response.headers["Content-Type"] == "image/svg+xml"
    assert response.headers["Content-Disposition"].startswith("attachment;")
    assert response.headers["Content-Security-Policy"] == "sandbox"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    response = await client.get(f"{FILES}/{pdf}", params={"thumb": "100x100", "format": "webp"})
    assert response.status == 200 and await response.read() == b"%PDF-1.4 doc"
    bad = await client.get(f"{FILES}/{pdf}", params={"thumb": "0x0"})
    await error_of(bad, 400, "bad_request")


async def test_a_thumbnail_is_kept_revalidated_and_deleted_with_its_file(client, admin_token, config):
    await photos(client, admin_token)
    cover = await with_cover(client, admin_token, photo())
    first, response = await thumbnail(client, cover, "100x100")
    etag = response.headers["ETag"]
    assert re.fullmatch(r'"[0-9a-f-]+-[0-9a-f]{32}-100x100\.jpeg"', etag), etag
    assert (await stored(config))["fs.files"] == 2
    again = await client.get(f"{FILES}/{cover}", params={"thumb": "100x100"}, headers={"If-None-Match": etag})
    assert again.status == 304
    original = await client.get(f"{FILES}/{cover}")
    assert original.headers["ETag"] != etag
    deleted = await client.delete(f"{FILES}/{cover}", headers=bearer(admin_token))
    assert deleted.status == 204
    left = await stored(config)
    assert "fs.files" not in left and "fs.chunks" not in left, left
    gone = await client.get(f"{FILES}/{cover}", params={"thumb": "100x100"})
    assert gone.status == 404


@pytest.fixture
async def replica_b(aiohttp_client: Any, config: Config, services: Any, clock: Any) -> AsyncIterator[Any]:
    """A second replica: its own services (image workers, caches, metrics) and app on the same
    MongoDB and Redis."""
    async with open_services(config, clock=clock) as other:
        yield await aiohttp_client(create_app(config, services=other))


async def generated(client: Any, token: str) -> float:
    response = await client.get("/metrics", headers=bearer(token))
    assert response.status == 200, await response.text()
    match = re.search(r'^cms_thumbnails_total\{outcome="generated"\} (\S+)$', await response.text(), re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def test_fifty_concurrent_first_requests_on_two_replicas_make_one_thumbnail(client, replica_b, admin_token,
                                                                                  config):
    await create_collection(client, admin_token, "big", [{"name": "pic", "type": "file"}])
    record = await created_with_files(client, admin_token, "big", None,
                                      ("pic", "12mp.jpg", photo((4000, 3000), quality=92), "image/jpeg"))
    cover = record["pic"]

    async def one(replica: Any) -> bytes:
        response = await replica.get(f"{FILES}/{cover}", params={"thumb": "100x100", "format": "webp"})
        assert response.status == 200, await response.text()
        return bytes(await response.read())

    answers = await asyncio.gather(*(one(client if n % 2 else replica_b) for n in range(50)))
    assert len(set(answers)) == 1 and Image.open(io.BytesIO(answers[0])).size == (100, 100)
    assert await generated(client, admin_token) + await generated(replica_b, admin_token) == 1
    assert (await stored(config))["fs.files"] == 2


async def test_a_warm_thumbnail_of_a_file_deleted_elsewhere_is_404_at_once(client, replica_b, admin_token):
    """Replica B serves the thumbnail from memory, its existence from the read cache; the file is
    then taken out of its record through replica A (and deleted after the commit), or deleted: B
    answers 404 at once."""
    await photos(client, admin_token)
    for how in ("record", "file"):
        record = await created_with_files(client, admin_token, "photos", {"title": how},
                                          ("cover", "c.jpg", photo(), "image/jpeg"))
        for _ in range(2):
            await thumbnail(replica_b, record["cover"], "100x100")
        if how == "record":
            changed = await client.patch(f"/api/v1/collections/photos/records/{record['id']}",
                                         headers=bearer(admin_token), json={"data": {"cover": None}})
            assert changed.status == 200
        else:
            deleted = await client.delete(f"{FILES}/{record['cover']}", headers=bearer(admin_token))
            assert deleted.status == 204
        gone = await replica_b.get(f"{FILES}/{record['cover']}", params={"thumb": "100x100"})
        assert gone.status == 404, how
