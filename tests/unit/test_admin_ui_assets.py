"""The admin UI's vendored assets (issue 15): htmx and its SSE extension exactly as published on npm,
with their licences, and no page or asset that needs the network."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import cms.admin_ui

STATIC = Path(cms.admin_ui.__file__).parent / "static"
TEMPLATES = Path(cms.admin_ui.__file__).parent / "templates"

HTMX_VERSION = "2.0.11"
"""npm `htmx.org@2.0.11`, file `dist/htmx.min.js` (`npm pack htmx.org@2.0.11`)."""
HTMX_SHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"
HTMX_SSE_VERSION = "2.2.4"
"""npm `htmx-ext-sse@2.2.4` (for htmx 2), file `dist/sse.min.js` (`npm pack htmx-ext-sse@2.2.4`; the tarball's
integrity is sha512-LJmxVhykyflBWgh5PvbRidcyuqMHlgfajmmzumvKctv9puvsufeH6OaejSMZTNTnEI8O2wXXn4ZZtBdpEMqmEQ==)."""
HTMX_SSE_SHA256 = "98a46496de0c3605fbffdce9167ba427bdd9553184f83f149c261891a92c0136"
FIRST_LOAD_JS_GZIP_LIMIT = 150 * 1024


def test_vendored_htmx_is_the_published_file():
    data = (STATIC / "htmx.min.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == HTMX_SHA256, f"htmx.min.js is not npm htmx.org@{HTMX_VERSION}"
    licence = (STATIC / "htmx.LICENSE").read_text()
    assert licence.startswith("Zero-Clause BSD")


def test_vendored_sse_extension_is_the_published_file():
    data = (STATIC / "htmx-ext-sse.min.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == HTMX_SSE_SHA256, \
        f"htmx-ext-sse.min.js is not npm htmx-ext-sse@{HTMX_SSE_VERSION}"
    assert (STATIC / "htmx-ext-sse.LICENSE").read_text().startswith("BSD Zero Clause License")


def test_first_load_javascript_is_small():
    size = sum(len(gzip.compress(p.read_bytes())) for p in STATIC.glob("*.js"))
    assert size <= FIRST_LOAD_JS_GZIP_LIMIT, size


def test_templates_have_no_inline_script_or_style_and_no_remote_assets():
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=", text), path
        assert not re.search(r"(src|href)=\"(https?:)?//", text), path
