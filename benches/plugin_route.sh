#!/usr/bin/env bash
# A Felix plugin's FastAPI route served by `plughost serve` against the same
# FastAPI app under uvicorn (its defaults), side by side in one run: wrk's
# requests per second and latency at 1, 16 and 64 connections, and the
# ratio. Needs wrk (Debian's package), fastapi and uvicorn (pip), and a
# release build (`cargo build --release`; PLUGHOST_BIN overrides).
#
# Fair by construction: both serve the same FastAPI app object's routes in
# one process on one CPython (the plugin is `trusted`, so plughost runs it
# in-process as uvicorn does; an isolated plugin's routes are not served,
# see docs/felix.md), both log nothing per request, both are checked to
# answer 200 with the same body before wrk runs, and a run with non-2xx
# answers is refused rather than reported.
#
#   bash benches/plugin_route.sh [seconds per run, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-5}"
bin="${PLUGHOST_BIN:-target/release/plughost}"
for need in wrk python3 "$bin"; do
  command -v "$need" >/dev/null || [ -x "$need" ] || { echo "missing: $need" >&2; exit 2; }
done
python3 -c "import fastapi, uvicorn" 2>/dev/null || { echo "pip install fastapi uvicorn" >&2; exit 2; }

work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
tree="$work/home/plugins/felix-bench"
mkdir -p "$tree/src/felix_bench" "$work/bundled"
cat > "$tree/pyproject.toml" <<'TOML'
[project]
name = "felix-bench"
version = "0.1.0"

[project.entry-points."felix.plugins"]
bench = "felix_bench:register"
TOML
cat > "$tree/src/felix_bench/__init__.py" <<'PY'
class Bench:
    name = "bench"

    def register_tools(self, register):
        pass

    def routes(self, app, *, tools):
        from fastapi import APIRouter

        router = APIRouter()

        @router.get("/bench/ping")
        async def ping():
            return {"plugin": "bench", "status": "ok"}

        app.include_router(router)


def register(registry):
    registry.register_plugin(Bench())


def peer_app():
    """The same app for uvicorn: one FastAPI app, the plugin's routes on it."""
    from fastapi import FastAPI

    app = FastAPI()
    Bench().routes(app, tools=None)
    return app
PY
echo '{"plugins":{"enabled":["bench"],"disabled":[],"trusted":["bench"]}}' > "$work/home/config.json"

PLUGHOST_BUNDLED_DIR="$work/bundled" "$bin" --home "$work/home" serve --port 18931 2>"$work/plughost.log" &
PYTHONPATH="$tree/src" python3 -m uvicorn --factory felix_bench:peer_app --port 18932 --log-level warning 2>"$work/uvicorn.log" &
for port in 18931 18932; do
  for _ in $(seq 300); do curl -fs "http://127.0.0.1:$port/bench/ping" >/dev/null && break; sleep 0.1; done
  body="$(curl -fs "http://127.0.0.1:$port/bench/ping")" || { echo "port $port does not answer the route" >&2; cat "$work"/*.log >&2; exit 1; }
  [ "$body" = '{"plugin":"bench","status":"ok"}' ] || { echo "port $port answered $body" >&2; exit 1; }
done

rps() {
  out="$(wrk -t1 -c"$1" -d"${secs}s" --latency "http://127.0.0.1:$2/bench/ping")"
  if grep -q "Non-2xx" <<<"$out"; then echo "non-2xx answers from port $2:" >&2; echo "$out" >&2; exit 1; fi
  awk '/Requests\/sec/ {r=$2} / 99%/ {p=$2} END {print r, p}' <<<"$out"
}
printf '%-8s %14s %10s %14s %10s %8s\n' clients plughost_rps p99 uvicorn_rps p99 ratio
for c in 1 16 64; do
  read -r ours ours99 <<<"$(rps "$c" 18931)"
  read -r peer peer99 <<<"$(rps "$c" 18932)"
  printf '%-8s %14s %10s %14s %10s %8.2f\n' "$c" "$ours" "$ours99" "$peer" "$peer99" "$(echo "$ours / $peer" | bc -l)"
done
