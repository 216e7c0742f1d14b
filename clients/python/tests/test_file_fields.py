"""Files in records through the client (decisions.md, Files in records, thumbnails and file tokens):
`files.get_url` with a thumbnail, and a protected file through `get_token` (multipart writes with `field+` /
`field-` are tested in test_batch_files_keys.py)."""

from __future__ import annotations

import struct
import zlib

import httpx
import pytest
from conftest import Service, unique

from cms_client import AsyncCmsClient, CmsClient

pytestmark = pytest.mark.anyio


def png(width: int = 64, height: int = 48, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A plain RGB PNG of one colour (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


async def test_get_url_thumbnail_and_protected_file_token(service: Service) -> None:
    name = unique("covers")
    async with AsyncCmsClient(service.url) as client:
        await client.auth.auth_with_password(service.admin_email, service.admin_password)
        await client.collections.create({"name": name, "list_rule": "", "view_rule": "", "schema": [
            {"name": "cover", "type": "file", "thumbs": ["32x32"]},
            {"name": "contract", "type": "file", "protected": True}]})
        record = await client.collection(name).create({}, files={
            "cover": ("cover.png", png(), "image/png"), "contract": ("contract.txt", b"signed", "text/plain")})
        url = client.files.get_url(record, record["cover"], thumb="32x32", format="webp")
        assert url == f"{service.url}/api/v1/files/{record['cover']}?thumb=32x32&format=webp"
        async with httpx.AsyncClient(timeout=30) as anonymous:
            thumb = await anonymous.get(url)
            assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/webp"
            assert thumb.content[:4] == b"RIFF" and thumb.content[8:12] == b"WEBP"
            plain = await anonymous.get(client.files.get_url(record, record["contract"]))
            assert plain.status_code == 404  # protected: a token is needed
            token = await client.files.get_token()
            signed = await anonymous.get(client.files.get_url(record, record["contract"], token=token))
            assert signed.status_code == 200 and signed.content == b"signed"
    with CmsClient(service.url) as sync_client:
        sync_client.auth.auth_with_password(service.admin_email, service.admin_password)
        sync_token = sync_client.files.get_token()
        signed_url = sync_client.files.get_url(record, record["contract"], token=sync_token)
        assert httpx.get(signed_url, timeout=30).content == b"signed"
        assert sync_client.files.get_url(record, None) == "" == sync_client.files.get_url(None, record["contract"])
