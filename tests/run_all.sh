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
"$venv/bin/python" -m pip install --quiet pytest pytest-asyncio mcp openai
"$venv/bin/python" -m pip install --quiet .
"$venv/bin/python" -m pip install --quiet mypy

echo "== stubtest: python/plughost/__init__.pyi against the installed wheel"
# The private modules (_cli, _runtime, _compat, _native) are implementation,
# not API: keep them out of the mypy build stubtest does (it type-checks every
# submodule it finds and stops on any error).
cat > "$venv/stubtest-mypy.ini" <<'INI'
[mypy]
exclude = (^|/)plughost/_[^/]*/?$
INI
"$venv/bin/python" -m mypy.stubtest plughost \
    --mypy-config-file "$venv/stubtest-mypy.ini" \
    --allowlist tests/python/stubtest_allowlist.txt

echo "== pytest (against the installed wheel)"
cd tests/python
# Run from tests/python so `import plughost` resolves to the installed wheel.
"$OLDPWD/$venv/bin/python" -m pytest -q
