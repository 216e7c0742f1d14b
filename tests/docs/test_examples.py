"""Every code block of the docs site (docs/**/*.md) is labelled, and every `bash` block runs.

(a) Each fenced block's language is one of a fixed set: `bash` (an API example, run here), `python`
and `ts` (only in the client guides, docs/clients/python.md and docs/clients/js.md, whose own test
suites run them), or a listing that is not an example (`console` for commands to type, `text`,
`json`, ...). An unlabelled block or another language fails, so no example escapes being run.

(b) The `bash` blocks of each page run in order in one `bash -euo pipefail` process (variables such as
TOKEN carry over within a page) against one live `cms serve` started by this module (embedded, a free
port, a temporary data directory), with `http://127.0.0.1:8090` replaced by its address. The rate
limits are switched off first through the settings API: every page logs in on its own, and more than
10 logins a minute from one address would be refused."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from cms.runtime.embedded import free_port

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
DOCUMENTED_BASE = "http://127.0.0.1:8090"
ADMIN = {"email": "admin@example.com", "password": "change-me-now"}

EXECUTED = frozenset({"bash"})
"""API examples, run by this module."""
CLIENT_LANGUAGES = {"python": "clients/python.md", "ts": "clients/js.md"}
"""Client examples: allowed only on their client's guide, whose test suite runs them."""
LISTINGS = frozenset({"console", "text", "json", "yaml", "toml", "ini", "dockerfile", "caddy", "nginx", "http",
                      "csv", "sql", "promql", "html", "js"})
"""Blocks that are not examples: commands to type (install, serve, deploy), files, outputs (the front-end
tutorial's `html` and `js` files are the ones tests/docs/test_tutorial.py runs in a browser)."""

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page (relative to docs/), first line number, language and text."""

    page: str
    line: int
    language: str
    text: str


def code_blocks(page: str, markdown: str) -> list[Block]:
    """The fenced blocks of one page, in order. The language is the first word of the info string
    (`{.bash}` and `bash title="x"` count as `bash`); an unclosed fence runs to the end of the page."""
    blocks: list[Block] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], opening["indent"]
        words = opening["info"].strip().lstrip("{").lstrip(".").split()
        language = words[0].rstrip("}") if words else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence) \
                    and not closing["info"].strip():
                break
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        blocks.append(Block(page, i + 1, language, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def language_problem(block: Block) -> str | None:
    """Why the block's language is not allowed on its page, or None when it is."""
    if block.language in EXECUTED or block.language in LISTINGS:
        return None
    if block.language in CLIENT_LANGUAGES:
        page = CLIENT_LANGUAGES[block.language]
        return None if block.page == page else f"`{block.language}` blocks belong on {page} only"
    if not block.language:
        return "unlabelled block"
    return f"unknown language `{block.language}`"


def pages() -> list[str]:
    """Every Markdown page of the site, relative to docs/."""
    return sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))


def page_blocks(page: str) -> list[Block]:
    """The fenced blocks of docs/<page>."""
    return code_blocks(page, (DOCS / page).read_text(encoding="utf-8"))


OWN_TEST = {"concepts/schema-as-code.md": "tests/docs/test_schema_guide.py",
            "tutorial/build-a-front-end.md": "tests/docs/test_tutorial.py"}
"""Pages whose examples need more than the one live server (three environments; a server that allows the
tutorial page's origin, and a browser): run by their own test."""
PAGES_WITH_EXAMPLES = [page for page in pages() if any(b.language in EXECUTED for b in page_blocks(page))]


@pytest.mark.parametrize("markdown, expected", [
    ("```bash\ncurl -fsS x\n```\n", [("bash", "curl -fsS x\n")]),
    ("text\n```\nno label\n```\n", [("", "no label\n")]),
    ("- item\n\n    ```nginx\n    location / {}\n    ```\n", [("nginx", "location / {}\n")]),
    ("````text\n```bash\ninner\n```\n````\n", [("text", "```bash\ninner\n```\n")]),
    ('``` bash title="walk"\necho\n```\n', [("bash", "echo\n")]),
    ("~~~{.json}\n{}\n~~~\n", [("json", "{}\n")]),
], ids=["bash", "unlabelled", "indented-in-a-list", "nested-fence", "info-string", "tilde-attr"])
def test_code_blocks_are_found_with_their_language(markdown, expected):
    assert [(b.language, b.text) for b in code_blocks("x.md", markdown)] == expected


@pytest.mark.parametrize("page, language, problem", [
    ("getting-started.md", "bash", None),
    ("operations/deploy.md", "console", None),
    ("clients/python.md", "python", None),
    ("clients/js.md", "ts", None),
    ("concepts/webhooks.md", "python", "`python` blocks belong on clients/python.md only"),
    ("index.md", "ts", "`ts` blocks belong on clients/js.md only"),
    ("index.md", "", "unlabelled block"),
    ("index.md", "sh", "unknown language `sh`"),
], ids=["bash", "console", "python-guide", "ts-guide", "python-elsewhere", "ts-elsewhere", "unlabelled", "sh"])
def test_language_rules(page, language, problem):
    assert language_problem(Block(page, 1, language, "")) == problem


@pytest.mark.parametrize("page", pages())
def test_every_block_is_labelled_with_an_allowed_language(page):
    problems = [f"docs/{page}:{b.line}: {problem}" for b in page_blocks(page)
                if (problem := language_problem(b)) is not None]
    assert problems == []


def test_the_site_has_examples_to_run():
    assert "getting-started.md" in PAGES_WITH_EXAMPLES
    assert len(PAGES_WITH_EXAMPLES) >= 10


def _request(base: str, method: str, path: str, body: object = None, token: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(base + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


@dataclass
class LiveServer:
    """A `cms serve` child process (embedded) and where it answers."""

    base: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def live_server(data_dir: Path, **env_extra: str) -> Iterator[LiveServer]:
    """A `cms serve` (embedded, a free port, `data_dir`, the admin ADMIN, `env_extra` in its environment)
    with the rate limits switched off, stopped on exit; its output goes to `data_dir/serve.log`."""
    log = data_dir / "serve.log"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MONGODB_URL", "REDIS_URL", "SECRET_KEY")}
    env.update(ADMIN_EMAIL=ADMIN["email"], ADMIN_PASSWORD=ADMIN["password"], **env_extra)
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cms", "serve", "--port", str(port), "--data-dir", str(data_dir / "data")],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=data_dir,
        )
    server = LiveServer(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if _request(server.base, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "cms serve did not become healthy:\n" + log.read_text()
            time.sleep(0.1)
        status, answer = _request(server.base, "POST", "/api/v1/auth/login", ADMIN)
        assert status == 200, answer
        token = answer["token"]["access_token"]  # type: ignore[index]
        status, answer = _request(server.base, "POST", "/api/v1/settings",
                                  {"key": "rate_limit_enabled", "value": False}, token)
        assert status == 200, answer
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(tmp_path_factory.mktemp("docs-examples")) as server:
        yield server


def run_bash(script: str, cwd: Path, what: str, timeout_s: float = 90) -> str:
    """Run `script` with `bash -euo pipefail` in `cwd`, asserting exit 0 (`what` names it in the
    failure, with the ends of its output); returns its standard output."""
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, capture_output=True,
                            text=True, timeout=timeout_s, check=False)
    assert result.returncode == 0, (
        f"{what}: exit {result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n"
        f"--- stderr\n{result.stderr[-4000:]}")
    return result.stdout


def test_bash_is_there():
    assert shutil.which("bash") is not None and shutil.which("curl") is not None


@pytest.mark.parametrize("page", [page for page in PAGES_WITH_EXAMPLES if page not in OWN_TEST])
def test_page_examples_run(live, page, tmp_path):
    script = "\n".join(b.text for b in page_blocks(page) if b.language in EXECUTED)
    run_bash(script.replace(DOCUMENTED_BASE, live.base), tmp_path, f"docs/{page}")
