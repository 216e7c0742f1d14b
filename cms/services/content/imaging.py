"""Image work with Pillow, run in the image worker processes (`image_pool.ImagePool`), never on the
event loop (decisions.md, Files in records, thumbnails and file tokens).

Pure functions of bytes: `inspect_image` (what an upload of an image must pass: the pixel limit, a
whole file) and `make_thumbnail` (a thumbnail: EXIF orientation applied, metadata dropped). The
module imports Pillow and the standard library only, so a worker starts quickly; `init_worker`
sets Pillow's pixel limit and bounds the worker's memory. `quick_inspect` is the one function the
web process runs itself: the same checks for a JPEG or a PNG of up to 4 MiB, read from the file's
structure without decoding (a walk of its segments or chunks; no Pillow), which spares the common
upload a round trip to a worker.
"""

from __future__ import annotations

import functools
import io
import re
import resource
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from PIL import Image, ImageOps, features

MAX_IMAGE_PIXELS = 64_000_000
"""The largest image (width x height) accepted at upload and read for a thumbnail: 64 megapixels
(an 8000 x 8000 photo). Pillow's own guard raises past twice this before decoding anything."""
WORKER_MEMORY_BYTES = 2 * 2**30
"""Address space of one image worker (RLIMIT_AS): a decoder that asks for more fails with
MemoryError instead of taking the machine's memory."""
JPEG_QUALITY = 85
WEBP_QUALITY = 80
AVIF_QUALITY = 60
AVIF_SPEED = 8
"""libavif's speed 0 (slowest, smallest) to 10; 8 encodes a 640x480 thumbnail in tens of ms."""
PNG_COMPRESS_LEVEL = 6
JPEG_END = b"\xff\xd9"
"""A JPEG's end-of-image marker (EOI)."""

FORMATS = {"webp": "WEBP", "avif": "AVIF", "png": "PNG", "jpeg": "JPEG"}
"""Thumbnail formats (the `format` parameter) -> Pillow's format names."""
MEDIA_TYPES = {"webp": "image/webp", "avif": "image/avif", "png": "image/png", "jpeg": "image/jpeg"}
RASTER_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp", "image/bmp", "image/tiff",
                          "image/avif"})
"""The media types of images Pillow reads here: checked at upload, thumbnails made of them. SVG is
never among them: it is not rasterised."""
SOURCE_FORMATS = {"image/jpeg": "jpeg", "image/png": "png", "image/webp": "webp", "image/avif": "avif"}
"""A thumbnail's default format: the source's; other sources (gif, bmp, tiff) give png."""
CROP_CENTERING = {"center": (0.5, 0.5), "top": (0.5, 0.0), "bottom": (0.5, 1.0)}


class ImageRefused(Exception):
    """The bytes are not an image this service takes: `reason` says why, for the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ImageInfo:
    """An image that passed `inspect_image`: Pillow's `format` name, `width` and `height` in pixels."""

    format: str
    width: int
    height: int


@functools.cache
def encodable_formats() -> tuple[str, ...]:
    """The thumbnail formats the installed Pillow can write (AVIF needs libavif), in FORMATS order."""
    needs = {"webp": "webp", "avif": "avif", "png": "zlib", "jpeg": "jpg"}
    return tuple(name for name in FORMATS if features.check(needs[name]))


def init_worker() -> None:
    """Run once in each worker process: Pillow's pixel guard at our limit and the memory bound."""
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    warnings.simplefilter("error", Image.DecompressionBombWarning)
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = WORKER_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(WORKER_MEMORY_BYTES, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):  # a platform without RLIMIT_AS: the pixel limit still holds
        pass


def _open(data: bytes) -> Image.Image:
    """The image of `data`, its header read and its size checked (nothing decoded yet). Raises
    ImageRefused (not an image Pillow reads, or over MAX_IMAGE_PIXELS)."""
    try:
        image = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        pixels = re.search(r"\((\d+) pixels\)", str(exc))  # Pillow's message: "Image size (N pixels) exceeds ..."
        raise _too_large(int(pixels.group(1)) if pixels else None) from None
    except Exception:
        raise ImageRefused("The image cannot be read: its header is not one of a supported format.") from None
    width, height = image.size
    if width * height > MAX_IMAGE_PIXELS:
        image.close()
        raise _too_large(width * height)
    if width < 1 or height < 1:
        image.close()
        raise ImageRefused("The image has no pixels.")
    return image


def _too_large(pixels: int | None) -> ImageRefused:
    shown = f" ({pixels:,})" if pixels else ""
    return ImageRefused(f"The image has too many pixels{shown}: at most {MAX_IMAGE_PIXELS:,} are accepted.")


@contextmanager
def _decoding(image: Image.Image) -> Iterator[None]:
    """Decode `image` inside: what Pillow raises becomes ImageRefused (a MemoryError: too many pixels;
    anything else: truncated or corrupt), and the image is closed at the end."""
    try:
        yield
    except ImageRefused:
        raise
    except MemoryError:
        raise _too_large(image.width * image.height) from None
    except Exception:
        raise ImageRefused("The image is truncated or corrupt.") from None
    finally:
        image.close()


def inspect_image(data: bytes) -> ImageInfo:
    """Check an uploaded image whole: within MAX_IMAGE_PIXELS and complete. A JPEG that ends with its
    end-of-image marker is complete (a truncated one ends inside its scan, where that marker cannot
    occur); one that does not (cut off, or with data after the image) is decoded at 1/8 scale, which
    still reads every byte of its scan. A PNG's chunks and checksums are verified up to IEND; other
    formats are decoded. Raises ImageRefused."""
    image = _open(data)
    with _decoding(image):
        info = ImageInfo(str(image.format), image.width, image.height)
        if info.format == "PNG":
            image.verify()
        elif info.format == "JPEG" and data.endswith(JPEG_END):
            pass
        else:
            if info.format == "JPEG":
                image.draft("RGB", (max(1, info.width // 8), max(1, info.height // 8)))
            image.load()
    return info


QUICK_CHECK_MAX_BYTES = 4 * 2**20
"""JPEGs and PNGs up to this size are checked by `quick_inspect`, in the web process."""
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_JPEG_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
"""The start-of-frame markers of JPEG (SOF0..SOF15 but DHT, JPG and DAC): where its size is."""


def quick_inspect(data: bytes) -> ImageInfo | None:
    """`inspect_image` for the common cases, read from the file's structure alone (no decoder, no
    Pillow: cheap and safe enough for the web process): a JPEG that ends with its end-of-image marker
    and has a frame header before its first scan, a PNG whose chunks all carry their checksum up to
    IEND. Raises ImageRefused (over MAX_IMAGE_PIXELS, or a PNG cut short or corrupt); None when the
    file is not one of these (anything else, or larger than QUICK_CHECK_MAX_BYTES): `inspect_image`
    decides then."""
    if len(data) > QUICK_CHECK_MAX_BYTES:
        return None
    if data.startswith(b"\xff\xd8") and data.endswith(JPEG_END):
        size = _jpeg_size(data)
        return None if size is None else _within_limit(ImageInfo("JPEG", *size))
    if data.startswith(PNG_SIGNATURE):
        return _within_limit(_png_checked(data))
    return None


def _within_limit(info: ImageInfo) -> ImageInfo:
    if info.width * info.height > MAX_IMAGE_PIXELS:
        raise _too_large(info.width * info.height)
    if info.width < 1 or info.height < 1:
        raise ImageRefused("The image has no pixels.")
    return info


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, walking its segments from the start; None when
    the walk meets something unexpected before a frame header (the decoder then decides)."""
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte
            position += 1
            continue
        if marker == 0xDA or marker == 0xD9:  # a scan or the end before any frame header
            return None
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            position += 2
            continue
        length = int.from_bytes(data[position + 2:position + 4], "big")
        if length < 2:
            return None
        if marker in _JPEG_FRAMES:
            if position + 9 > len(data) or length < 7:
                return None
            height = int.from_bytes(data[position + 5:position + 7], "big")
            width = int.from_bytes(data[position + 7:position + 9], "big")
            return width, height
        position += 2 + length
    return None


def _png_checked(data: bytes) -> ImageInfo:
    """A PNG's size from its IHDR, once every chunk's CRC is checked up to IEND (what Pillow's
    `verify` checks). Raises ImageRefused."""
    position = len(PNG_SIGNATURE)
    width = height = 0
    first = True
    while True:
        if position + 12 > len(data):
            raise ImageRefused("The image is truncated or corrupt.")
        length = int.from_bytes(data[position:position + 4], "big")
        kind = data[position + 4:position + 8]
        end = position + 8 + length
        if length > 2**31 - 1 or end + 4 > len(data):
            raise ImageRefused("The image is truncated or corrupt.")
        if zlib.crc32(data[position + 4:end]) != int.from_bytes(data[end:end + 4], "big"):
            raise ImageRefused("The image is truncated or corrupt.")
        if first:
            if kind != b"IHDR" or length < 8:
                raise ImageRefused("The image is truncated or corrupt.")
            width = int.from_bytes(data[position + 8:position + 12], "big")
            height = int.from_bytes(data[position + 12:position + 16], "big")
            first = False
        if kind == b"IEND":
            return ImageInfo("PNG", width, height)
        position = end + 4


def _oriented_size(image: Image.Image) -> tuple[int, int]:
    """The size the image shows once its EXIF orientation is applied (5 to 8 swap the sides)."""
    orientation = image.getexif().get(0x0112, 1)
    return (image.height, image.width) if orientation in (5, 6, 7, 8) else image.size


def target_size(source: tuple[int, int], width: int, height: int, mode: str) -> tuple[int, int]:
    """The size of the thumbnail of an image of size `source` (oriented): `width` x `height` for the
    crop modes, the largest size within both for `fit` (never larger than the source), and the
    other side by the ratio when one is 0 (at least 1 pixel)."""
    w, h = source
    if width == 0:
        return max(1, round(w * height / h)), height
    if height == 0:
        return width, max(1, round(h * width / w))
    if mode == "fit":
        scale = min(width / w, height / h, 1.0)
        return max(1, round(w * scale)), max(1, round(h * scale))
    return width, height


def make_thumbnail(data: bytes, width: int, height: int, mode: str, fmt: str) -> bytes:
    """The thumbnail of the image `data` as `fmt` (a FORMATS key): `width` x `height` pixels in
    `mode` (`center`, `top`, `bottom`: scaled to cover, then cropped; `fit`: fitted inside), or one
    side 0 to keep the ratio. The EXIF orientation is applied and every metadata block (EXIF, XMP,
    ICC profile, comments) dropped; an animated image gives its first frame. Raises ImageRefused
    (an image that cannot be read)."""
    image = _open(data)
    with _decoding(image):
        oriented = _oriented_size(image)
        size = target_size(oriented, width, height, mode)
        if mode in CROP_CENTERING and width and height:
            scale = max(size[0] / oriented[0], size[1] / oriented[1])
            cover = (max(1, round(oriented[0] * scale)), max(1, round(oriented[1] * scale)))
        else:
            cover = size
        if image.format == "JPEG":
            # decode at 1/2, 1/4 or 1/8 scale when that still covers the thumbnail (libjpeg's DCT scaling)
            raw = cover if oriented == image.size else (cover[1], cover[0])
            image.draft(image.mode if image.mode in ("RGB", "L", "CMYK") else "RGB", raw)
        upright = ImageOps.exif_transpose(image)
        thumb = _resized(upright, size, mode)
        return _encoded(thumb, fmt)


def _resized(image: Image.Image, size: tuple[int, int], mode: str) -> Image.Image:
    """`image` brought to `size`: cropped at the mode's centering to the target's ratio, then scaled."""
    if image.mode not in ("RGB", "RGBA", "L", "LA"):
        has_alpha = image.mode in ("P", "PA") and "transparency" in image.info or "A" in image.mode
        image = image.convert("RGBA" if has_alpha else "RGB")
    w, h = image.size
    box: tuple[float, float, float, float] = (0, 0, w, h)
    if mode in CROP_CENTERING:
        target_ratio = size[0] / size[1]
        cx, cy = CROP_CENTERING[mode]
        if w / h > target_ratio:  # too wide: keep the full height
            crop_w = h * target_ratio
            left = (w - crop_w) * cx
            box = (left, 0, left + crop_w, h)
        else:
            crop_h = w / target_ratio
            top = (h - crop_h) * cy
            box = (0, top, w, top + crop_h)
    return image.resize(size, Image.Resampling.LANCZOS, box=box, reducing_gap=3.0)


def _encoded(image: Image.Image, fmt: str) -> bytes:
    """`image` written as `fmt`, without any metadata (a fresh `info`, no EXIF, no ICC profile)."""
    image.info = {}
    if fmt == "jpeg" and image.mode != "RGB" and image.mode != "L":
        image = _flattened(image)
    out = io.BytesIO()
    if fmt == "jpeg":
        image.save(out, "JPEG", quality=JPEG_QUALITY, optimize=False, progressive=False)
    elif fmt == "webp":
        image.save(out, "WEBP", quality=WEBP_QUALITY, method=4)
    elif fmt == "avif":
        image.save(out, "AVIF", quality=AVIF_QUALITY, speed=AVIF_SPEED)
    else:
        image.save(out, "PNG", compress_level=PNG_COMPRESS_LEVEL)
    return out.getvalue()


def _flattened(image: Image.Image) -> Image.Image:
    """An image with alpha laid on white (JPEG has no alpha)."""
    rgba = image.convert("RGBA")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba, mask=rgba.getchannel("A"))
    return background
