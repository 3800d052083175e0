#!/usr/bin/env bash
# Every benchmark of issue 26 in one command, each side by side with its
# peer in one run, and every ratio printed (the README's performance table
# is this output). Run from the repository: `bash benches/run_all.sh`.
#
# Makes (once) a venv of its own with the peers' packages from PyPI
# (fastapi, uvicorn, jsonschema for the FastAPI peer), outside the work tree:
# PLUGHOST_BENCH_VENV, default ~/.cache/plughost/bench-venv.
# PLUGHOST_BENCH_QUICK=1 shortens the rounds (a smoke run, noisier figures).
set -euo pipefail
cd "$(dirname "$0")/.."

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
bench() { nice -n 10 cargo bench -q --bench "$1" 2>/dev/null | tee "$out/$1.txt"; }

echo "== 1. /v1/chat/completions: plughost serve (defaults: the bench plugin isolated) vs FastAPI peer"
bench chat_endpoint
echo
echo "== 2. a tool call with the bundled plugins on vs off"
bench bundled_call
echo
echo "== 3. cold start: plughost plugins list (empty home) vs python -c pass"
nice -n 10 cargo build -q --release --bin plughost
bin=target/release/plughost
python="$(ldd "$bin" | sed -n 's/.*=> \(.*\)\/lib\/libpython.*/\1/p' | head -1)/bin/python3"
[ -x "$python" ] || python=python3
empty="$out/empty-home"
mkdir -p "$empty"
# As a user runs them: bytecode is cached (CPython's own for the stdlib,
# plughost's for its embedded modules), so an environment that says not to
# write it (PYTHONDONTWRITEBYTECODE, set on some CI machines) is not used
# here; the first run writes the cache and the median is over the rest.
(
    unset PYTHONDONTWRITEBYTECODE
    "$bin" --home "$empty" plugins list >/dev/null
    "$python" benches/coldstart.py "$runs" -- "$bin" --home "$empty" plugins list --- "$python" -c pass >"$out/cold.json"
)
"$python" - "$out/cold.json" <<'EOF'
import json, sys
ours, floor = json.load(open(sys.argv[1]))
print(f"plugins list   median {ours['median_s']*1e3:6.1f} ms   peak {ours['max_rss_kib']/1024:5.1f} MiB")
print(f"python -c pass median {floor['median_s']*1e3:6.1f} ms   peak {floor['max_rss_kib']/1024:5.1f} MiB")
t, m = ours['median_s'] / floor['median_s'], ours['max_rss_kib'] / floor['max_rss_kib']
print(f"ratio cold start time {t:.2f}× (target ≤ 1.2×) {'met' if t <= 1.2 else 'MISSED'}   "
      f"peak memory {m:.2f}× (target ≤ 2×) {'met' if m <= 2 else 'MISSED'}")
EOF
echo
echo "== 4. the wheel: call_tool / acall_tool vs the minimal Python host"
if [ -x .venv-test/bin/python ] && .venv-test/bin/python -c 'import plughost' 2>/dev/null; then
    nice -n 10 .venv-test/bin/python benches/python_api.py
else
    echo "(no .venv-test with the wheel: bash tests/run_all.sh builds it)"
fi
echo
echo "== 5. isolated plugins"
bench isolation
echo
echo "== per-call figures against the reference (Flowly-semantics) host"
bench dispatch
echo
echo "== ratios"
grep -h "ratio\|×" "$out"/*.txt | grep -v "^ *$" || true
