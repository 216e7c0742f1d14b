#!/usr/bin/env bash
# The CI gate for the habits we keep (STYLE rules 9 and 10): ruff (line length, import order,
# bugbear, pyupgrade, public docstrings) and mypy --strict, configured in pyproject.toml.
# Exits non-zero on any finding. Run from anywhere: `bash scripts/check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "ruff check cms workers tests"
python3 -m ruff check cms workers tests
echo "mypy (strict: cms, workers, tests)"
python3 -m mypy
