"""Debian's Chromium driven by Playwright, for the browser tests (tests/ui, tests/docs/test_tutorial.py):
never a downloaded browser. A missing browser or tool skips the test, unless CMS_REQUIRE_BROWSER=1 (CI),
which makes it fail."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"


def require(present: bool, missing: str) -> None:
    """Skip the test when `present` is false (`missing` says what is missing and how to get it), or
    fail it with CMS_REQUIRE_BROWSER=1."""
    if present:
        return
    if os.environ.get("CMS_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{missing}, and CMS_REQUIRE_BROWSER=1")
    pytest.skip(f"{missing}; set CMS_REQUIRE_BROWSER=1 to fail instead")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (`/usr/bin/chromium`) through Playwright's sync API, closed on exit; skips
    (or fails, see `require`) without the browser or Playwright. Playwright's sync API keeps an event
    loop running while it is open: close it before any async test of another module runs."""
    require(os.path.exists(CHROMIUM), f"{CHROMIUM} is missing (apt-get install -y chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        require(False, "playwright is not installed (pip install -e '.[dev]')")
        raise
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield launched
        finally:
            launched.close()
