#!/usr/bin/env bash
# Time from a plugin file change to the new version answering, under
# `plughost serve --watch`: the plugin's file is rewritten with a new
# version, and a chat turn that calls its tool is sent again and again until
# the answer names the new version; 20 changes, median and worst time. The
# watcher's 250 ms debounce is part of the time. The plugin runs isolated
# (serve's default for a third-party plugin), so each change also starts a
# worker. A release build is used when there is one (PLUGHOST_BIN overrides).
#
#   bash benches/reload.sh [changes, default 20]
set -euo pipefail
cd "$(dirname "$0")/.."
changes="${1:-20}"
bin="${PLUGHOST_BIN:-target/release/plughost}"
[ -x "$bin" ] || bin=target/debug/plughost
[ -x "$bin" ] || { echo "build plughost first (cargo build --release)" >&2; exit 2; }

work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/home/plugins/ver" "$work/bundled"
echo '{"plugins": {"enabled": ["ver"]}}' > "$work/home/config.json"
write() {
  printf "name: ver\nversion: '%s'\n" "$1" > "$work/home/plugins/ver/plugin.yaml"
  printf "def ver():\n    return 'v%s'\n\ndef register(ctx):\n    ctx.register_tool('ver', {'type': 'object', 'properties': {}}, ver)\n" "$1" \
    > "$work/home/plugins/ver/__init__.py"
}
write 0
printf 'turns:\n  - tool_calls:\n      - name: ver\n  - say: "Done: {tool_results}"\n' > "$work/script.yaml"
PLUGHOST_BUNDLED_DIR="$work/bundled" "$bin" --home "$work/home" serve --port 0 --watch \
  --model scripted --script "$work/script.yaml" 2> "$work/serve.log" &
for _ in $(seq 200); do
  grep -q "listening on" "$work/serve.log" && break
  sleep 0.05
done
url="$(grep -o 'http://[0-9.:]*' "$work/serve.log" | head -1)"
[ -n "$url" ] || { cat "$work/serve.log" >&2; exit 1; }

python3 - "$url" "$work/home/plugins/ver" "$changes" "$bin" <<'PY'
import json, statistics, sys, time, urllib.request

url, plugin, changes, binary = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

def answer():
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "ver"}]}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["choices"][0]["message"]["content"]

def write(n):
    with open(plugin + "/plugin.yaml", "w") as f:
        f.write(f"name: ver\nversion: '{n}'\n")
    with open(plugin + "/__init__.py", "w") as f:
        f.write(f"def ver():\n    return 'v{n}'\n\ndef register(ctx):\n    ctx.register_tool('ver', {{'type': 'object', 'properties': {{}}}}, ver)\n")

assert answer().endswith("v0"), answer()
times = []
for n in range(1, changes + 1):
    write(n)
    start = time.monotonic()
    while not answer().endswith(f"v{n}"):
        time.sleep(0.005)
    times.append(time.monotonic() - start)
ms = sorted(t * 1000 for t in times)
print(f"{binary}: file change -> new version answering, {changes} changes: "
      f"median {statistics.median(ms):.0f} ms, best {ms[0]:.0f} ms, worst {ms[-1]:.0f} ms "
      f"(debounce 250 ms included)")
PY
