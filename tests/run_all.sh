#!/usr/bin/env bash
# The whole test suite, from a fresh clone: what the tests need, then the
# Rust tests (unit, the integration binary tests/suite, the two process-wide
# ones, doc tests), then the wheel in a virtualenv with the pytest suite.
#
# Installs into .venv-test (ignored by git): pytest, pytest-asyncio, mypy,
# maturin, uv, FastAPI and the official mcp and openai clients. As root it
# also installs Debian's postgresql, haproxy and chromium; otherwise it
# names what is missing, and the tests that need it fail saying so.
set -euo pipefail
cd "$(dirname "$0")/.."

# Say what each long step is doing and how long it took, so minutes of
# building never look like a hang.
step() { echo; echo "== [$(date +%H:%M:%S) +${SECONDS}s] $*"; }
ticker=""
trap '[ -n "$ticker" ] && kill "$ticker" 2>/dev/null; echo "== done in ${SECONDS}s"' EXIT
# A line every 30 s while a quiet step runs.
tick() { ( while sleep 30; do echo "   … still $1 (${SECONDS}s so far)"; done ) & ticker=$!; }
untick() { kill "$ticker" 2>/dev/null || true; ticker=""; }

python3 -c "import sysconfig, sys; sys.exit(0 if sysconfig.get_config_var('Py_ENABLE_SHARED') else 'plughost embeds CPython: python3 must be built with --enable-shared (pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install 3.11)')"

venv="$PWD/.venv-test"
step "Python packages into $venv: pytest, pytest-asyncio, mypy, maturin, uv, fastapi, mcp, openai"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    pytest pytest-asyncio mypy "maturin>=1.5,<2" uv fastapi mcp openai
# The tests run with this virtualenv active: `python3` and `uv` are its
# own, and plughost's embedded interpreter adds its site-packages (as it
# does for a user's activated virtualenv), so plugins import FastAPI.
export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
export PLUGHOST_TEST_MCP_PYTHON="$venv/bin/python"

step "Debian's packages: PostgreSQL and HAProxy (tests/suite/replicas*), Chromium (tests/suite/hermes_browser.rs)"
need_apt=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
[ -x /usr/sbin/haproxy ] || need_apt+=(haproxy)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ "${#need_apt[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        tick "installing ${need_apt[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
        untick
    else
        echo "not root, so not installed: ${need_apt[*]} — the tests that need them will fail saying so;" >&2
        echo "install them with: sudo apt-get install ${need_apt[*]}" >&2
    fi
fi

# tests/suite/plugin_deps.rs runs plugins needing Python 3.12 and 3.13 in
# workers on those CPythons of the machine (found on PATH or under pyenv,
# as a user's would be); each worker imports plughost from its
# stable-ABI wheel (cp310-abi3: one wheel for every CPython from 3.10),
# built once here (a dev build: only the test uses it).
step "plughost's stable-ABI wheel (cp310-abi3), dev build, into target/wheels-abi3"
rm -rf target/wheels-abi3
tick "building the abi3 wheel"
maturin build --quiet --profile dev --features abi3 --out target/wheels-abi3
untick
export PLUGHOST_TEST_WHEELS="$PWD/target/wheels-abi3"

step "cargo test (builds the crate and the test binaries first: a few minutes on a cold target/)"
cargo test

# Parity (issue 47): the dialect behaviour tests again, with every plugin
# isolated: tests/suite/common turns PLUGHOST_TEST_ISOLATE=all into
# `"isolate": "all"` in the homes the helpers write and the host builder's
# isolation (common::builder); a test that can only run in-process says so
# by name and is skipped. (Tests writing their own config.json run as
# they say: docs/isolation.md, *Parity*.)
step "cargo test, dialect behaviour tests again with every plugin isolated (PLUGHOST_TEST_ISOLATE=all)"
rm -f target/parity-skipped.log
PLUGHOST_TEST_ISOLATE=all PLUGHOST_TEST_SKIPPED_LOG="$PWD/target/parity-skipped.log" \
    cargo test --test suite -- flowly hermes codumentor felix claude_ bundle:: iso_parity gateway:: gateway_actions:: --skip plugin_deps
echo "in-process only, skipped in the isolated pass: $(cat target/parity-skipped.log 2>/dev/null | wc -l)"
cat target/parity-skipped.log 2>/dev/null || true

step "wheel: maturin builds plughost (dev profile: its dependencies are the ones cargo test just built) and pip installs it into $venv"
rm -rf target/wheels-test
tick "building the wheel"
maturin build --quiet --profile dev --out target/wheels-test
untick
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels-test/plughost-*.whl

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
"$venv/bin/python" -m pytest -q

# Parity (issue 47): the wheel's cases again with every plugin isolated
# (conftest.py sets PLUGHOST_ISOLATE=all, which a Host without isolate=
# follows); a case that can only run in-process is skipped saying why (-rs).
step "pytest again, every plugin isolated (PLUGHOST_TEST_ISOLATE=all)"
PLUGHOST_TEST_ISOLATE=all "$venv/bin/python" -m pytest -q -rs
