#!/usr/bin/env bash
# The whole test suite: the Rust tests (unit, integration, doc), then the
# wheel built by maturin and installed into a fresh virtualenv, with the
# pytest suite run against it there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Say what each long step is doing and how long it took, so minutes of
# building never look like a hang.
step() { echo; echo "== [$(date +%H:%M:%S)] $*"; }
ticker=""
trap '[ -n "$ticker" ] && kill "$ticker" 2>/dev/null; echo "== done in ${SECONDS}s"' EXIT

step "MCP test servers: the official mcp package from PyPI in .venv-mcp (tests/mcp_client*.rs and tests/bundle*.rs start their servers with it)"
python3 -m venv .venv-mcp
.venv-mcp/bin/python -m pip install --quiet mcp
export PLUGHOST_TEST_MCP_PYTHON="$PWD/.venv-mcp/bin/python"

# tests/plugin_deps.rs runs a plugin needing Python 3.12 in a worker on a
# CPython 3.12 of the machine; that worker imports plughost, so it needs the
# wheel built for 3.12 (a dev build: only the test uses it).
# The first candidate that runs: a pyenv shim answers `command -v` for a
# version it will not run, so each one is tried.
py312=""
for candidate in "$(command -v python3.12 || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
        py312="$candidate"
        break
    fi
done
if [ -n "$py312" ]; then
    step "wheel for CPython 3.12 ($py312): maturin (the PyPI package) in .venv-mcp, output in target/wheels-cp312"
    .venv-mcp/bin/python -m pip install --quiet "maturin>=1.5,<2"
    rm -rf target/wheels-cp312
    .venv-mcp/bin/maturin build --quiet --profile dev -i "$py312" --out target/wheels-cp312
    export PLUGHOST_TEST_WHEELS="$PWD/target/wheels-cp312"
else
    step "no CPython 3.12 on PATH or under pyenv: tests/plugin_deps.rs skips its Python 3.12 case"
fi
step "PostgreSQL and HAProxy for tests/replicas*.rs (each test starts its own cluster from Debian's binaries; skipped with a reason when absent)"
if [ "$(id -u)" = 0 ] && { ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ ! -x /usr/sbin/haproxy ]; }; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql haproxy >/dev/null || echo "could not install postgresql/haproxy" >&2
fi

step "cargo test (builds the tests first: minutes on a cold target/)"
cargo test

step "wheel: a fresh virtualenv in .venv-test"
venv=.venv-test
rm -rf "$venv"
python3 -m venv "$venv"
step "wheel: installing pip, pytest, pytest-asyncio, mypy, and the mcp and openai clients"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet pytest pytest-asyncio mypy mcp openai uv
step "wheel: pip install . (maturin compiles plughost in release mode; its pyo3 crates have their own artifacts in target/, the rest is shared with cargo)"
# pip hides the build's output; a line every 30 s says it is still going.
( while sleep 30; do echo "   … still building the wheel (${SECONDS}s so far)"; done ) &
ticker=$!
"$venv/bin/python" -m pip install --quiet .
kill "$ticker" 2>/dev/null || true
ticker=""

step "stubtest: python/plughost/__init__.pyi against the installed wheel"
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

step "pytest (against the installed wheel)"
cd tests/python
# Run from tests/python so `import plughost` resolves to the installed wheel.
"$OLDPWD/$venv/bin/python" -m pytest -q
