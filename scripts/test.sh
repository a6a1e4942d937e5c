#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite: lint, unit and integration tests.
# Integration tests need root and OVS; as root (CI) they all run. Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
echo "[test] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "[test] pytest"
exec .venv/bin/python -m pytest "$@"
