"""The pure parts of media (decisions.md, Files in records, thumbnails and file tokens): thumbnail
sizes, type patterns, types from signatures, thumbnail sizes per mode, and the image checks."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from cms.models import FieldSpec
from cms.services.content.file_fields import ThumbSize, allowed_thumbs, mime_allowed, parse_thumb
from cms.services.content.file_intake import effective_type
from cms.services.content.imaging import ImageRefused, inspect_image, make_thumbnail, target_size


@pytest.mark.parametrize("text, expected", [
    ("100x100", ThumbSize(100, 100, "center")),
    ("100x100t", ThumbSize(100, 100, "top")),
    ("100x100b", ThumbSize(100, 100, "bottom")),
    ("100x100f", ThumbSize(100, 100, "fit")),
    ("0x50", ThumbSize(0, 50, "center")),
    ("640x0", ThumbSize(640, 0, "center")),
    ("0x0", None), ("99999x1", None), ("4001x10", None), ("0x50f", None), ("100X100", None),
    ("100x100x", None), ("-1x5", None), (" 100x100", None), ("100x100\n", None), ("", None),
], ids=lambda v: repr(v))
def test_thumbnail_sizes(text, expected):
    assert parse_thumb(text) == expected
    if expected is not None:
        assert expected.spec == text


def test_allowed_thumbnail_sizes():
    assert allowed_thumbs(None) == ("100x100",)
    spec = FieldSpec("f", "file", thumbs=("640x0", "100x100", "50x50f"))
    assert allowed_thumbs(spec) == ("100x100", "640x0", "50x50f")


@pytest.mark.parametrize("content_type, patterns, allowed", [
    ("image/png", None, True), ("image/png", (), True), ("image/png", ("image/*",), True),
    ("image/png", ("image/jpeg",), False), ("application/pdf", ("image/*", "application/pdf"), True),
    ("text/plain; charset=utf-8", ("text/plain",), True), ("imagex/png", ("image/*",), False),
])
def test_type_patterns(content_type, patterns, allowed):
    assert mime_allowed(content_type, patterns) is allowed


def png_bytes(size=(8, 6)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (1, 2, 3)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize("head, claimed, expected", [
    (png_bytes(), "text/plain", "image/png"),
    (b"<html></html>", "image/png", "application/octet-stream"),
    (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml", "image/svg+xml"),
    (b"a,b\n", "TEXT/CSV", "text/csv"),
    (b"PK\x03\x04" + b"\0" * 40, "image/png", "application/zip"),
    (b"", None, "application/octet-stream"),
])
def test_a_type_comes_from_the_signature(head, claimed, expected):
    assert effective_type(head, claimed) == expected


@pytest.mark.parametrize("source, width, height, mode, expected", [
    ((400, 200), 100, 100, "center", (100, 100)),
    ((400, 200), 100, 100, "fit", (100, 50)),
    ((40, 20), 100, 100, "fit", (40, 20)),  # fit never enlarges
    ((400, 200), 0, 50, "center", (100, 50)),
    ((400, 200), 50, 0, "center", (50, 25)),
    ((3, 1000), 0, 10, "center", (1, 10)),  # at least one pixel
])
def test_thumbnail_target_sizes(source, width, height, mode, expected):
    assert target_size(source, width, height, mode) == expected


def jpeg_bytes(size=(320, 240)) -> bytes:
    out = io.BytesIO()
    Image.effect_noise(size, 50).convert("RGB").save(out, "JPEG", quality=90)
    return out.getvalue()


def test_the_image_checks():
    jpeg = jpeg_bytes()
    assert inspect_image(jpeg).format == "JPEG"
    assert inspect_image(jpeg + b"trailing data after the image").width == 320  # decoded: whole
    for broken in (jpeg[: len(jpeg) // 2], png_bytes()[:-20], b"\xff\xd8\xff garbage"):
        with pytest.raises(ImageRefused):
            inspect_image(broken)


def test_a_thumbnail_drops_metadata_and_keeps_alpha_where_it_can():
    image = Image.new("RGBA", (64, 64), (255, 0, 0, 128))
    out = io.BytesIO()
    image.save(out, "PNG", icc_profile=b"\0" * 64)
    for fmt, mode in (("png", "RGBA"), ("webp", "RGBA"), ("jpeg", "RGB")):
        thumb = Image.open(io.BytesIO(make_thumbnail(out.getvalue(), 32, 32, "center", fmt)))
        assert thumb.size == (32, 32) and thumb.mode == mode and "icc_profile" not in thumb.info


def test_the_quick_checks_agree_with_pillow():
    """JPEGs and PNGs of every kind Pillow writes: the structural check finds their size, and refuses
    what Pillow's check refuses; a JPEG without its end marker is left to the decoder."""
    from cms.services.content.imaging import quick_inspect

    image = Image.effect_noise((200, 120), 40).convert("RGB")
    cases: list[tuple[str, dict[str, Any]]] = [("JPEG", {}), ("JPEG", {"progressive": True}),
                                               ("JPEG", {"exif": b"Exif\0\0" + b"\0" * 64}), ("PNG", {}),
                                               ("PNG", {"optimize": True})]
    for fmt, options in cases:
        out = io.BytesIO()
        image.save(out, fmt, **options)
        data = out.getvalue()
        info = quick_inspect(data)
        assert info is not None and (info.format, info.width, info.height) == (fmt, 200, 120), (fmt, options)
        assert inspect_image(data).width == 200
    assert quick_inspect(jpeg_bytes()[:-10]) is None  # no end marker: the decoder decides
    with pytest.raises(ImageRefused, match="truncated or corrupt"):
        quick_inspect(png_bytes()[:-5])
    corrupt = bytearray(png_bytes())
    corrupt[40] ^= 0xFF
    with pytest.raises(ImageRefused):
        quick_inspect(bytes(corrupt))
