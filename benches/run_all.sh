#!/usr/bin/env bash
# Every benchmark with a peer in one command, each side by side with its
# peer in one run, and every ratio printed; the last step writes the table
# into docs/benchmarks.md (between its bench-table markers), so the page
# always shows this job's own output. Run from the repository:
# `bash benches/run_all.sh`.
#
# Makes (once) a venv of its own with the peers' packages from PyPI
# (fastapi, uvicorn, jsonschema for the FastAPI peer), outside the work tree:
# PLUGHOST_BENCH_VENV, default ~/.cache/plughost/bench-venv.
# PLUGHOST_BENCH_QUICK=1 shortens the rounds (a smoke run, noisier figures;
# the table it writes says so).
# The wheel (item 4) is built here with the release profile and installed
# into .venv-bench (ignored by git), unless PLUGHOST_BENCH_WHEEL_PYTHON names
# an interpreter the wheel to measure is installed in. .venv-test is never
# used: tests/run_all.sh builds its wheel with the dev profile, which would
# measure an unoptimised build. PLUGHOST_BENCH_NO_WHEEL=1 skips item 4.
set -euo pipefail
cd "$(dirname "$0")/.."

# The table is written at the end: find out now, not after an hour of
# benchmarks, that the page has nowhere to put it.
if ! grep -qx '<!-- bench-table:begin -->' docs/benchmarks.md || ! grep -qx '<!-- bench-table:end -->' docs/benchmarks.md; then
    echo "docs/benchmarks.md needs the lines <!-- bench-table:begin --> and <!-- bench-table:end --> around its table" >&2
    exit 1
fi

venv="${PLUGHOST_BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/plughost/bench-venv}"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import fastapi, uvicorn, jsonschema' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q fastapi uvicorn jsonschema
fi
export PLUGHOST_BENCH_PYTHON="$venv/bin/python"
if [ "${PLUGHOST_BENCH_QUICK:-}" = 1 ]; then
    export PLUGHOST_BENCH_SECONDS=1 PLUGHOST_BENCH_CALLS=5000
    runs=10
else
    runs=30
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
started=$SECONDS
echo "== building (release): the plughost binary and the benches (not --benches: that also builds the library's test harness)"
nice -n 10 cargo build -q --release --bin plughost --bench chat_endpoint --bench bundled_call --bench isolation --bench dispatch
bench() { nice -n 10 cargo bench -q --bench "$1" 2>/dev/null | tee "$out/$1.txt"; }
# Where cargo put it: CARGO_TARGET_DIR or a config's target-dir moves it.
target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
bin="$target_dir/release/plughost"
# The interpreter the binary links against, so `python -c pass` and the
# minimal loader start the same CPython.
python="$(ldd "$bin" | sed -n 's/.*=> \(.*\)\/lib\/libpython.*/\1/p' | head -1)/bin/python3"
[ -x "$python" ] || python=python3
# The start-up order file names functions of a release build; a change in
# what the compiler inlines (the LTO mode, a new toolchain) can leave most
# of its names gone, and the linker skips those silently.
if command -v nm >/dev/null; then
    listed=$(sort -u link/startup-order.txt | wc -l)
    present=$(nm "$bin" | awk '{print $NF}' | sort -u | comm -12 - <(sort -u link/startup-order.txt) | wc -l)
    if [ $((present * 10)) -lt $((listed * 8)) ]; then
        echo "warning: only $present of the $listed functions in link/startup-order.txt are in $bin: the cold start's figures are off; re-record it (bash link/record-startup-order.sh)" >&2
    fi
fi

echo
echo "== 1. /v1/chat/completions: plughost serve (defaults: the bench plugin isolated) vs FastAPI peer"
bench chat_endpoint
echo
echo "== 2. a tool call with the bundled plugins on vs off"
bench bundled_call
echo
echo "== 3. cold start: plughost plugins list vs python -c pass, 100 plugins vs benches/min_loader.py"
nice -n 10 "$python" benches/cold_ratios.py "$bin" "$runs" | tee "$out/cold.txt"
echo
echo "== 4. the wheel (bundled plugins off): call_tool / acall_tool vs the minimal Python host"
# The wheel: PLUGHOST_BENCH_WHEEL_PYTHON (an interpreter it is installed
# in), else built here (maturin, release profile: the binary's build above
# shares its dependencies but not plughost's own crate, which the wheel
# builds with the extension-module feature) and installed into .venv-bench.
# Built on every run, so the wheel measured is this tree's; when nothing
# changed since the last run cargo finds it all fresh and maturin only
# packs it again.
wheel_python="${PLUGHOST_BENCH_WHEEL_PYTHON:-}"
if [ -z "$wheel_python" ] && [ "${PLUGHOST_BENCH_NO_WHEEL:-}" = 1 ]; then
    echo "(PLUGHOST_BENCH_NO_WHEEL=1: the wheel is not built; item 4 not measured)"
elif [ -z "$wheel_python" ]; then
    wheel_venv="$PWD/.venv-bench"
    if [ ! -x "$wheel_venv/bin/python" ] || ! "$wheel_venv/bin/python" -c 'import maturin, jsonschema' 2>/dev/null; then
        # jsonschema: benches/python_api.py's row of the reference host with validation.
        python3 -m venv "$wheel_venv"
        "$wheel_venv/bin/pip" install -q --disable-pip-version-check "maturin>=1.5,<2" jsonschema
    fi
    echo "(building the release wheel into $wheel_venv: minutes when plughost's code changed since the last run)"
    if ! nice -n 10 "$wheel_venv/bin/maturin" build -q --release -i "$wheel_venv/bin/python" --out "$out/wheel" >"$out/maturin.log" 2>&1; then
        tail -20 "$out/maturin.log" >&2
        echo "the release wheel did not build (above: the end of maturin's output)" >&2
        exit 1
    fi
    "$wheel_venv/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "$out"/wheel/plughost-*.whl
    wheel_python="$wheel_venv/bin/python"
fi
[ -n "$wheel_python" ] && nice -n 10 "$wheel_python" benches/python_api.py | tee "$out/python_api.txt"
echo
echo "== 5. isolated plugins (benches/isolation.rs)"
# The peer is the interpreter the worker embeds, with the same site: a
# venv's python skips the base site-packages' .pth files, which the worker
# (and any plugin needing its site-packages) runs, so it would time less.
PLUGHOST_BENCH_PYTHON="$python" bench isolation
echo
echo "== per-call figures against the reference (Flowly-semantics) host"
bench dispatch
echo
echo "== every ratio (the table of docs/benchmarks.md; $((SECONDS - started)) s)"
"$python" benches/summary.py "$out" --update docs/benchmarks.md
echo "(written into docs/benchmarks.md between <!-- bench-table:begin --> and <!-- bench-table:end -->)"
