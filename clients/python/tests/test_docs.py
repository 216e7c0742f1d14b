"""Every ```python block of docs/clients/python.md runs, as a script, against the live server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Service

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "clients" / "python.md"
EXAMPLE_URL = "http://127.0.0.1:8090"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", GUIDE.read_text(), flags=re.S | re.M)


def test_the_guide_has_examples() -> None:
    assert len(BLOCKS) >= 10
    first = BLOCKS[0]
    assert len(first.strip().splitlines()) <= 22
    for step in ("auth_with_password", "expand=", "realtime.subscribe", "files.upload"):
        assert step in first


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(service: Service, index: int, tmp_path: Path) -> None:
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index].replace(EXAMPLE_URL, service.url))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, f"example {index} failed:\n{BLOCKS[index]}\n{done.stdout}\n{done.stderr}"
