"""Regenerate, or check, the parts of the clients generated from the service's OpenAPI document.

    python scripts/clients.py generate   # write them
    python scripts/clients.py check      # exit 1, naming each file, when a regeneration differs

The document is read from the running service's `/openapi.json`: the one `CMS_URL` names, else a
`cms serve` (the `cms` on PATH, embedded, a free port, a temporary data directory) started here
and stopped after. It is kept as `docs/api/openapi.json` (the docs site's API reference renders
it), and each client's generator (issue 29; well-kept generators, not ours) reads that file:

- `clients/js/src/generated/openapi.ts` by openapi-typescript (`clients/js` needs `npm ci` first);
- `clients/python/cms_client/_generated/models.py` by datamodel-code-generator;
- `clients/python/cms_client/_sync.py`, the blocking client, rewritten from `_async.py` by
  `scripts/unasync_client.py` (no service needed; checked here too).

`check` regenerates into a temporary directory and compares byte for byte, so a changed route,
schema or generator version fails CI (`.ci/run`) until `generate` is run and the result committed.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import unasync_client  # scripts/, beside this file

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = Path("docs/api/openapi.json")
JS_CLIENT = ROOT / "clients" / "js"
START_TIMEOUT_S = 90


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def service_url() -> Iterator[str]:
    """`CMS_URL`, or the URL of a `cms serve` started for the block (stopped after it)."""
    if os.environ.get("CMS_URL"):
        yield os.environ["CMS_URL"].rstrip("/")
        return
    cms = shutil.which("cms")
    if cms is None:
        sys.exit("clients.py: no `cms` on PATH (pip install -e '.[dev]') and no CMS_URL")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="cms-clients-") as data_dir:
        process = subprocess.Popen([cms, "serve", "--port", str(port), "--data-dir", data_dir],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if process.poll() is not None:
                    sys.exit(f"clients.py: cms serve stopped: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5) as answer:
                        if answer.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    sys.exit(f"clients.py: cms serve did not answer /health within {START_TIMEOUT_S} s")
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def fetch_document(url: str) -> bytes:
    """The service's /openapi.json, as stable bytes (sorted keys, two-space indent, final newline)."""
    with urllib.request.urlopen(url + "/openapi.json", timeout=30) as answer:
        document = json.load(answer)
    return (json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def generate_js(document: Path, out: Path) -> None:
    """openapi-typescript (the version pinned in clients/js/package-lock.json): the API's types
    (`paths`, `components`) for clients/js. `--empty-objects-unknown`: an object schema without
    properties (a batch request's `body`, a record's `data`) is `unknown`, not `Record<string, never>`;
    `--default-non-nullable=false`: a request field with a default stays optional."""
    binary = JS_CLIENT / "node_modules" / ".bin" / "openapi-typescript"
    if not binary.exists():
        sys.exit("clients.py: run `npm ci` in clients/js first (openapi-typescript is a dev dependency)")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(binary), str(document), "--output", str(out), "--empty-objects-unknown",
                    "--default-non-nullable=false"], check=True, cwd=JS_CLIENT, stdout=subprocess.DEVNULL)


def generate_python(document: Path, out: Path) -> None:
    """datamodel-code-generator: the API's schemas as TypedDicts for clients/python.

    TypedDicts (not pydantic) keep the client's runtime to httpx: an answer is the API's JSON as it
    came, typed. `--strict-nullable` keeps `nullable: true` as `| None`; `--formatters builtin` and
    `--disable-timestamp` make the output depend on the document and the generator's version only."""
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "datamodel_code_generator", "--input", str(document),
                    "--input-file-type", "openapi", "--output", str(out), "--disable-timestamp",
                    "--output-model-type", "typing.TypedDict", "--target-python-version", "3.11",
                    "--use-standard-collections", "--use-union-operator", "--strict-nullable",
                    "--use-schema-description", "--use-field-description", "--formatters", "builtin"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


GENERATED: list[tuple[Path, Callable[[Path, Path], None]]] = [
    (Path("clients/js/src/generated/openapi.ts"), generate_js),
    (Path("clients/python/cms_client/_generated/models.py"), generate_python),
]
"""Each generated file (relative to the repository root) and the function that writes it."""


def write_all(target: Path, document_bytes: bytes) -> list[Path]:
    """Write the document and every generated file under `target`; the relative paths written."""
    (target / DOCUMENT).parent.mkdir(parents=True, exist_ok=True)
    (target / DOCUMENT).write_bytes(document_bytes)
    for relative, generate in GENERATED:
        generate((target / DOCUMENT).resolve(), (target / relative).resolve())
    return [DOCUMENT, *(relative for relative, _ in GENERATED)]


def main() -> int:
    """`generate` or `check` (see the module docstring); 0 on success, 1 when `check` finds drift."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["generate", "check"])
    command = parser.parse_args().command
    sync_fresh = unasync_client.unasync(unasync_client.SOURCE.read_text())
    if command == "generate":
        unasync_client.TARGET.write_text(sync_fresh)
        print(f"wrote {unasync_client.TARGET.relative_to(ROOT)}")
    elif unasync_client.TARGET.read_text() != sync_fresh:
        print("drift: clients/python/cms_client/_sync.py is not the rewrite of _async.py "
              "(run: python scripts/unasync_client.py)")
        return 1
    with service_url() as url:
        document_bytes = fetch_document(url)
    if command == "generate":
        for relative in write_all(ROOT, document_bytes):
            print(f"wrote {relative}")
        return 0
    with tempfile.TemporaryDirectory(prefix="cms-clients-check-") as scratch:
        drift = 0
        for relative in write_all(Path(scratch), document_bytes):
            fresh, kept = (Path(scratch) / relative), ROOT / relative
            if not kept.exists() or kept.read_bytes() != fresh.read_bytes():
                drift += 1
                print(f"drift: {relative} differs from a regeneration (run: python scripts/clients.py generate)")
                old = kept.read_text().splitlines() if kept.exists() else []
                sys.stdout.writelines(line + "\n" for line in list(difflib.unified_diff(
                    old, fresh.read_text().splitlines(), str(relative), "regenerated", lineterm=""))[:40])
    if drift:
        return 1
    print("clients: generated parts match the service's /openapi.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
