"""The admin UI's vendored assets (issue 15): htmx exactly as published on npm, with its licence,
and no page or asset that needs the network."""

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
FIRST_LOAD_JS_GZIP_LIMIT = 150 * 1024


def test_vendored_htmx_is_the_published_file():
    data = (STATIC / "htmx.min.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == HTMX_SHA256, f"htmx.min.js is not npm htmx.org@{HTMX_VERSION}"
    licence = (STATIC / "htmx.LICENSE").read_text()
    assert licence.startswith("Zero-Clause BSD")


def test_first_load_javascript_is_small():
    size = sum(len(gzip.compress(p.read_bytes())) for p in STATIC.glob("*.js"))
    assert size <= FIRST_LOAD_JS_GZIP_LIMIT, size


def test_templates_have_no_inline_script_or_style_and_no_remote_assets():
    for path in TEMPLATES.rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=", text), path
        assert not re.search(r"(src|href)=\"(https?:)?//", text), path
