"""`cms serve` and `cms admin create` as real processes: embedded servers, restart, shutdown."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from cms.cli import freeze_start_up_heap
from cms.runtime.embedded import free_port

ADMIN = {"email": "boss@example.com", "password": "boss-password-1"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URL", "REDIS_URL", "SECRET_KEY")}
    return {**env, **extra}


def _call(base: str, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body else None)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Server:
    """A `cms serve` child process on a free port."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cms", "serve", "--port", str(self.port), "--data-dir", str(data_dir)],
            env=_env(**env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.process.stdout.read().decode()  # type: ignore[union-attr]
            try:
                if _call(self.base, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError("cms serve did not become healthy")
        self.children = psutil.Process(self.process.pid).children(recursive=True)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


def test_config_error_is_one_line_naming_the_variable(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "cms", "serve", "--data-dir", str(tmp_path)],
        env=_env(SMTP_PORT="not-a-port"), capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "SMTP_PORT" in lines[0]


def test_serve_embedded_restart_keeps_data_and_leaves_no_orphans(tmp_path: Path):
    data_dir = tmp_path / "data"
    server = Server(data_dir, ADMIN_EMAIL=ADMIN["email"], ADMIN_PASSWORD=ADMIN["password"])
    try:
        names = {c.name() for c in server.children}
        assert any("redis-server" in n for n in names), names
        status, login = _call(server.base, "POST", "/api/v1/auth/login", ADMIN)
        assert status == 200, login
        token = login["token"]["access_token"]
        status, _ = _call(server.base, "POST", "/api/v1/collections",
                          {"name": "notes", "schema": [{"name": "text", "type": "text"}]}, token)
        assert status == 201
        status, record = _call(server.base, "POST", "/api/v1/collections/notes/records", {"data": {"text": "kept"}},
                               token)
        assert status == 201
        assert json.loads((data_dir / "embedded.json").read_text())["mongodb_url"].startswith("mongodb://")

        # admin create reaches the running embedded servers through embedded.json
        created = subprocess.run(
            [sys.executable, "-m", "cms", "admin", "create", "second@example.com", "--password", "second-pass-1",
             "--data-dir", str(data_dir)], env=_env(), capture_output=True, text=True, timeout=60, check=False,
        )
        assert created.returncode == 0, created.stderr
        assert _call(server.base, "POST", "/api/v1/auth/login",
                     {"email": "second@example.com", "password": "second-pass-1"})[0] == 200
    finally:
        assert server.stop() == 0
    assert not (data_dir / "embedded.json").exists()
    for child in server.children:
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, child

    again = Server(data_dir)
    try:
        status, body = _call(again.base, "GET", f"/api/v1/collections/notes/records/{record['id']}")
        assert status == 200 and body["text"] == "kept"
        # the embedded SECRET_KEY was kept, so a token from before the restart still works
        assert _call(again.base, "GET", "/api/v1/auth/me", token=token)[0] == 200
    finally:
        assert again.stop() == 0


def test_admin_create_without_a_running_server(tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-m", "cms", "admin", "create", "solo@example.com", "--password", "solo-pass-12",
         "--data-dir", str(tmp_path)], env=_env(), capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "solo@example.com created" in result.stdout
    weak = subprocess.run(
        [sys.executable, "-m", "cms", "admin", "create", "weak@example.com", "--password", "short",
         "--data-dir", str(tmp_path)], env=_env(), capture_output=True, text=True, timeout=60, check=False,
    )
    assert weak.returncode == 1 and "at least 8" in weak.stderr


@pytest.mark.parametrize("argv", [["--version"], ["serve", "--help"]])
def test_cli_entry_points(argv: list[str]):
    result = subprocess.run([sys.executable, "-m", "cms", *argv], capture_output=True, text=True, timeout=30,
                            check=False)
    assert result.returncode == 0 and "cms" in result.stdout


def test_start_up_heap_is_frozen_before_serving():
    """Issue 37: objects alive when a web process has started are out of the cycle collector's
    full collections (`gc.freeze`), which then walk only what was made since."""
    made_at_start_up = [object() for _ in range(1000)]
    before = gc.get_freeze_count()
    try:
        freeze_start_up_heap()
        assert gc.get_freeze_count() >= before + len(made_at_start_up)
    finally:
        gc.unfreeze()  # this test process goes on collecting as before
