"""The built docs site (MkDocs, `mkdocs build -d cms/static/guide`) at `/docs/guide/`, when the package
carries it; the API explorer stays at `/docs`. The site is plain files: a directory's URL answers its
`index.html`, an unknown page is the API's 404, directories are never listed, and nothing outside the
directory is served (no `..` segment, no symbolic link on the way)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from cms.errors import NotFound

PREFIX = "/docs/guide"
GUIDE_DIR = Path(__file__).resolve().parents[1] / "static" / "guide"
"""Where the package carries the built site (gitignored; the Dockerfile builds it)."""
GUIDE_ROOT: web.AppKey[Path] = web.AppKey("guide_root", Path)


def add_guide(app: web.Application, root: Path | None) -> bool:
    """Serve the site in `root` at `/docs/guide/` (and redirect `/docs/guide` there) when `root` holds a
    built site (an `index.html`); register nothing otherwise. Returns whether the site is served."""
    if root is None or not (root / "index.html").is_file():
        return False
    app[GUIDE_ROOT] = root.resolve()
    app.router.add_get(PREFIX, _to_index)
    app.router.add_get(PREFIX + "/{path:.*}", guide_page)
    return True


def guide_file(root: Path, path: str) -> Path | None:
    """The file under `root` that the URL path `path` (relative to `/docs/guide/`) names: the file
    itself, or a directory's `index.html`. None when there is none, when a segment is `.` or `..` or
    holds a backslash or NUL, or when a segment (or the index file) is a symbolic link."""
    segments = [segment for segment in path.split("/") if segment]
    if any(segment in (".", "..") or "\\" in segment or "\x00" in segment for segment in segments):
        return None
    target = root
    for segment in segments:
        target = target / segment
        if target.is_symlink():
            return None
    if target.is_dir():
        target = target / "index.html"
        if target.is_symlink():
            return None
    return target if target.is_file() else None


async def guide_page(request: web.Request) -> web.StreamResponse:
    """GET /docs/guide/{path}: a file of the site (a directory's URL: its `index.html`; a directory
    without the trailing slash is redirected to it, so the page's relative links resolve). Raises
    NotFound (404 in the error model) for anything else."""
    path = request.match_info["path"]
    target = guide_file(request.app[GUIDE_ROOT], path)
    if target is None:
        raise NotFound("No such page in the docs site")
    if target.name == "index.html" and path and not path.endswith(("/", "index.html")):
        raise web.HTTPMovedPermanently(f"{PREFIX}/{path}/")
    return web.FileResponse(target)


async def _to_index(request: web.Request) -> web.StreamResponse:
    """GET /docs/guide: redirect to `/docs/guide/`."""
    raise web.HTTPMovedPermanently(PREFIX + "/")
