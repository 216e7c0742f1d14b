"""The worked example of docs/concepts/schema-as-code.md ("Moving a schema between environments") runs: its
`bash` blocks, in order in one shell, against three running instances (laptop, staging, production: `cms
serve` in production mode on the session's MongoDB and Redis, each on a database of its own), each
environment a directory holding its `.env` as the page says. The page's addresses are replaced by the
servers': `http://127.0.0.1:8090` (the laptop) and `https://cms.example.com` (production). Then the end
state is checked: the three instances have one schema, and production's post kept its value."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.test_examples import DOCUMENTED_BASE, EXECUTED, OWN_TEST, page_blocks
from tests.test_replicas import Processes, _env, _wait_healthy

PAGE = "concepts/schema-as-code.md"
PRODUCTION_BASE = "https://cms.example.com"
ENVIRONMENTS = ("laptop", "staging", "production")
ADMIN = {"ADMIN_EMAIL": "admin@example.com", "ADMIN_PASSWORD": "change-me-now"}


@pytest.fixture
def environments(mongodb_url: str, redis_url: str, tmp_path: Path) -> Iterator[dict[str, tuple[str, str]]]:
    """Each environment's (API base URL, database), its `cms serve` running and its directory holding its `.env`."""
    processes: list[Processes] = []
    found: dict[str, tuple[str, str]] = {}
    try:
        for name in ENVIRONMENTS:
            env = {**_env(mongodb_url, redis_url), **ADMIN, "MONGODB_DB": f"docs_{name}_{uuid.uuid4().hex[:8]}"}
            directory = tmp_path / name
            directory.mkdir()
            (directory / ".env").write_text("".join(f"{key}={env[key]}\n" for key in (
                "MONGODB_URL", "REDIS_URL", "MONGODB_DB", "SECRET_KEY")) + "LOG_LEVEL=WARNING\n")
            running = Processes(tmp_path / f"{name}-serve", env)
            (tmp_path / f"{name}-serve").mkdir()
            processes.append(running)
            url, process = running.serve("serve")
            _wait_healthy(url, process, running.log("serve"))
            found[name] = (url, env["MONGODB_DB"])
        yield found
    finally:
        for running in processes:
            running.stop_all()


def snapshot_hash(base: str) -> str:
    request = urllib.request.Request(base + "/api/v1/auth/login", method="POST", data=json.dumps(
        {"email": ADMIN["ADMIN_EMAIL"], "password": ADMIN["ADMIN_PASSWORD"]}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        token = json.loads(response.read())["token"]["access_token"]
    request = urllib.request.Request(base + "/api/v1/schema", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(json.loads(response.read())["hash"])


def test_the_page_is_run_here_not_by_the_generic_runner() -> None:
    assert OWN_TEST[PAGE] == "tests/docs/test_schema_guide.py"


def test_the_worked_example_runs(environments: dict[str, tuple[str, str]], tmp_path: Path) -> None:
    script = "\n".join(b.text for b in page_blocks(PAGE) if b.language in EXECUTED)
    script = script.replace(DOCUMENTED_BASE, environments["laptop"][0])
    script = script.replace(PRODUCTION_BASE, environments["production"][0])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONGODB_", "REDIS_", "CMS_", "SCHEMA_"))
           and k != "SECRET_KEY"}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, (
        f"docs/{PAGE}: exit {result.returncode}\n--- stdout\n{result.stdout[-6000:]}\n"
        f"--- stderr\n{result.stderr[-6000:]}")
    lines = result.stdout.splitlines()
    assert '~ posts.headline  name: "title" -> "headline"' in lines
    assert "Hello from the laptop" in lines and "Our first real post" in lines
    assert "refused: the apply would lose data" in lines
    assert lines[-1] == "409"
    hashes = {name: snapshot_hash(base) for name, (base, _) in environments.items()}
    assert len(set(hashes.values())) == 1, hashes
