"""One live `cms serve` for the whole run (the `cms` on PATH, a free port, a temporary data directory), unless
`CMS_URL` names a running one. Tests reach it only through the client and plain HTTP."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

SECRET_KEY = "cms-client-tests-secret-key-0123456789abcdef"
"""The SECRET_KEY the run gives its own server (tests that mint tokens need it)."""
START_TIMEOUT_S = 120.0


@dataclass
class Service:
    """The server under test: its URL, the admin's credentials, the signing secret (None when unknown) and the
    file its output goes to (None for a server named by CMS_URL)."""

    url: str
    admin_email: str
    admin_password: str
    secret_key: str | None
    log_path: Path | None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen[bytes] | None, log_path: Path | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:] if log_path else ""
            raise RuntimeError(f"cms serve exited with {process.returncode}:\n{tail}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"cms serve did not answer /health within {START_TIMEOUT_S} s")


def _prepare(service: Service) -> None:
    """Switch the rate limits off (the tests sign in as the admin many times a minute)."""
    token = httpx.post(service.url + "/api/v1/auth/login", timeout=30,
                       json={"email": service.admin_email, "password": service.admin_password}).json()["token"]
    headers = {"Authorization": f"Bearer {token['access_token']}"}
    answer = httpx.post(service.url + "/api/v1/settings", headers=headers, timeout=30,
                        json={"key": "rate_limit_enabled", "value": False})
    answer.raise_for_status()


@pytest.fixture(scope="session")
def service() -> Iterator[Service]:
    if os.environ.get("CMS_URL"):
        running = Service(os.environ["CMS_URL"].rstrip("/"), os.environ.get("CMS_ADMIN_EMAIL", "admin@example.com"),
                          os.environ.get("CMS_ADMIN_PASSWORD", "change-me-now"), os.environ.get("CMS_SECRET_KEY"),
                          None)
        _prepare(running)
        yield running
        return
    cms = shutil.which("cms")
    if cms is None:
        pytest.exit("no `cms` on PATH (pip install -e '.[dev]' at the repository root) and no CMS_URL", 2)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="cms-client-py-") as scratch:
        log_path = Path(scratch) / "serve.log"
        env = {**os.environ, "ADMIN_EMAIL": "admin@example.com", "ADMIN_PASSWORD": "change-me-now",
               "SECRET_KEY": SECRET_KEY, "LOG_LEVEL": "INFO"}
        for name in ("MONGODB_URL", "REDIS_URL", "SMTP_HOST"):
            env.pop(name, None)
        with log_path.open("wb") as log:
            process = subprocess.Popen([cms, "serve", "--host", "127.0.0.1", "--port", str(port), "--data-dir",
                                        str(Path(scratch) / "data")], stdout=log, stderr=subprocess.STDOUT, env=env)
        running = Service(f"http://127.0.0.1:{port}", "admin@example.com", "change-me-now", SECRET_KEY, log_path)
        try:
            _wait_healthy(running.url, process, log_path)
            _prepare(running)
            yield running
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def unique(prefix: str) -> str:
    """A name no other test (or earlier run against the same server) uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def totp(secret: str, at: float | None = None) -> str:
    """The RFC 6238 code of a base32 `secret` (SHA-1, 30 s, 6 digits) at `at` (now)."""
    key = base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))
    counter = int((time.time() if at is None else at) // 30)
    digest = hmac.new(key, struct.pack(">Q", counter), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    number = struct.unpack(">I", digest[offset:offset + 4])[0] & 0x7FFFFFFF
    return f"{number % 1_000_000:06d}"


def wait_for(predicate: Callable[[], Any], timeout_s: float = 15.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy (returned) or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def emailed_code(service: Service, email: str, since: int, timeout_s: float = 20.0) -> str:
    """The 6-digit code of the latest email to `email` the server logged after byte `since` of its log."""
    if service.log_path is None:
        pytest.skip("reading emailed codes needs the run's own server (its log)")

    def find() -> str | None:
        text = service.log_text()[since:]
        at = text.rfind(f"to={email}")
        match = re.search(r"\b(\d{6})\b", text[at:]) if at >= 0 else None
        return match.group(1) if match else None

    return str(wait_for(find, timeout_s, f"an email to {email} in the server log"))


def emailed_token(service: Service, email: str, since: int, timeout_s: float = 20.0) -> str:
    """The `token` of the link in the latest email to `email` the server logged after byte `since` of its log
    (a verification, password-reset or email-change link)."""
    if service.log_path is None:
        pytest.skip("reading emailed links needs the run's own server (its log)")

    def find() -> str | None:
        text = service.log_text()[since:]
        at = text.rfind(f"to={email} ")
        match = re.search(r"[?&]token=([A-Za-z0-9_\-.]+)", text[at:]) if at >= 0 else None
        return match.group(1) if match else None

    return str(wait_for(find, timeout_s, f"an emailed link to {email} in the server log"))


@dataclass
class Blog:
    """Two related collections made for the run: `authors` {name} and `posts` {title, views, author -> authors}."""

    authors: str
    posts: str


@pytest.fixture(scope="session")
def blog(service: Service) -> Blog:
    from cms_client import CmsClient

    names = Blog(unique("authors"), unique("posts"))
    with CmsClient(service.url) as client:
        client.auth.auth_with_password(service.admin_email, service.admin_password)
        authors = client.collections.create({"name": names.authors, "schema": [{"name": "name", "type": "text"}]})
        client.collections.create({"name": names.posts, "schema": [
            {"name": "title", "type": "text", "validation": {"required": True, "max": 80}},
            {"name": "views", "type": "number"},
            {"name": "author", "type": "relation", "collection_id": authors["id"], "max_select": 1},
        ]})
    return names
