#!/usr/bin/env bash
# The whole test suite: the Rust tests (unit, integration, doc), then the
# wheel built by maturin and installed into a fresh virtualenv, with the
# pytest suite run against it there.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test"
cargo test

echo "== wheel: pip install . into a fresh virtualenv"
venv=.venv-test
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet pytest
"$venv/bin/python" -m pip install --quiet .

echo "== pytest (against the installed wheel)"
cd tests/python
# Run from tests/python so `import plughost` resolves to the installed wheel.
"$OLDPWD/$venv/bin/python" -m pytest -q
