#!/usr/bin/env bash
# Records which functions of the `plughost` binary its start-up runs, in the
# order they first run, into link/startup-order.txt; build.rs hands that
# file to the linker (`--symbol-ordering-file`) so those functions sit
# together at the front of `.text`.
#
# Why: a start touches ~1.7 MiB of code scattered over 20 MiB of `.text`,
# and the kernel maps every touched 64 KiB window (fault-around), so a
# `plughost plugins list` had ~10 MiB of the binary resident: most of its
# peak memory over `python -c pass` and much of its start-up page faults
# (issue 26, item 3). Stale entries are harmless: the linker skips names
# that no longer exist, and new code just lands after the listed functions.
#
# Re-run after changes to what a start does (needs valgrind):
#   bash link/record-startup-order.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet
bin="$PWD/target/release/plughost"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/empty" "$work/many/plugins" "$work/no-bundled"
enabled=""
for i in $(seq -w 0 19); do
  mkdir -p "$work/many/plugins/p$i"
  echo "name: p$i" >"$work/many/plugins/p$i/plugin.yaml"
  printf "def register(ctx):\n    ctx.register_tool('tool_%s', {'type': 'object', 'properties': {'q': {'type': 'string'}}}, lambda q='': q)\n    ctx.register_hook('post_tool_call', lambda c: None)\n" "$i" >"$work/many/plugins/p$i/__init__.py"
  enabled="$enabled\"p$i\","
done
echo "{\"plugins\": {\"enabled\": [${enabled%,}]}}" >"$work/many/config.json"

# The starts a user makes most: the defaults' listing, a home of user
# plugins, and the main job (one agent turn on the embedded model).
record() {
  valgrind --tool=callgrind --demangle=no --compress-strings=no \
    --callgrind-out-file="$work/cg.$1" "${@:2}" >/dev/null 2>&1
}
record 1 "$bin" --home "$work/empty" plugins list
record 2 env PLUGHOST_BUNDLED_DIR="$work/no-bundled" "$bin" --home "$work/many" plugins list
record 3 "$bin" --home "$work/empty" run "hello"

python3 - "$bin" "$work"/cg.1 "$work"/cg.2 "$work"/cg.3 >link/startup-order.txt <<'PY'
import sys

binary, outputs = sys.argv[1], sys.argv[2:]
seen, order = set(), []
for path in outputs:
    in_binary = False
    with open(path) as f:
        for line in f:
            if line.startswith("ob="):
                in_binary = line[3:].strip() == binary
            elif line.startswith("fn=") and in_binary:
                # callgrind marks recursion depth as NAME'N
                name = line[3:].strip().split("'")[0]
                if name not in seen:
                    seen.add(name)
                    order.append(name)
print("\n".join(order))
PY
echo "link/startup-order.txt: $(wc -l <link/startup-order.txt) functions" >&2
