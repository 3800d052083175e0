#!/usr/bin/env bash
# A plughost cluster on this machine: a PostgreSQL (deploy/pg-start.sh),
# N `plughost serve --sessions postgres://…` replicas on loopback ports and
# HAProxy in front (round-robin, no sticky routing). See docs/deploy.md.
#
#   deploy/cluster.sh start STATE_DIR [-- serve options…]
#   deploy/cluster.sh stop STATE_DIR
#
# Environment: PLUGHOST (the binary; default: plughost on PATH, else
# target/release/plughost, else target/debug/plughost), REPLICAS (3),
# LB_PORT (8800; replicas on LB_PORT+1 …), PG_PORT (5433), PLUGHOST_HOME
# (the home every replica loads its plugins from; default ~/.plughost).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cmd=${1:?start or stop}
state=${2:?a state directory}
shift 2
[ "${1:-}" = "--" ] && shift

if [ "$cmd" = stop ]; then
    for pidfile in "$state"/*.pid; do
        [ -e "$pidfile" ] || continue
        kill "$(cat "$pidfile")" 2>/dev/null || true
        rm -f "$pidfile"
    done
    "$here/pg-start.sh" --stop "$state/pg"
    echo "stopped"
    exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop STATE_DIR" >&2; exit 2; }

plughost=${PLUGHOST:-}
if [ -z "$plughost" ]; then
    for c in "$(command -v plughost || true)" "$here/../target/release/plughost" "$here/../target/debug/plughost"; do
        [ -n "$c" ] && [ -x "$c" ] && { plughost=$c; break; }
    done
fi
[ -n "$plughost" ] || { echo "no plughost binary: set PLUGHOST" >&2; exit 2; }
replicas=${REPLICAS:-3}
lb_port=${LB_PORT:-8800}
pg_port=${PG_PORT:-5433}
mkdir -p "$state"

url=$("$here/pg-start.sh" "$state/pg" "$pg_port")
echo "PostgreSQL: $url"
# The replicas run beside the database: through its Unix socket (in
# STATE/pg) a statement costs less than through loopback TCP.
socket_dir=$(cd "$state/pg" && pwd)
url="postgres://plughost@${socket_dir//\//%2F}:$pg_port/plughost"

servers=""
for i in $(seq 1 "$replicas"); do
    port=$((lb_port + i))
    home_args=()
    [ -n "${PLUGHOST_HOME:-}" ] && home_args=(--home "$PLUGHOST_HOME")
    "$plughost" "${home_args[@]}" serve --port "$port" --sessions "$url" "$@" \
        >"$state/replica$i.log" 2>&1 &
    echo $! >"$state/replica$i.pid"
    servers+="    server r$i 127.0.0.1:$port check"$'\n'
done
for i in $(seq 1 "$replicas"); do
    port=$((lb_port + i))
    for _ in $(seq 1 300); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    echo "replica $i: http://127.0.0.1:$port ($(grep -m1 'sessions in\|differs' "$state/replica$i.log" || true))"
done

haproxy_bin=$(command -v haproxy || echo /usr/sbin/haproxy)
python3 - "$here/haproxy.cfg.in" "$state/haproxy.cfg" "127.0.0.1:$lb_port" "$servers" <<'PY'
import sys
src, dst, listen, servers = sys.argv[1:]
balance = "balance hdr(x-plughost-session)\n    hash-type consistent"
text = (open(src).read().replace("@LISTEN@", listen)
        .replace("@BALANCE@", balance).replace("@SERVERS@\n", servers))
open(dst, "w").write(text)
PY
"$haproxy_bin" -db -f "$state/haproxy.cfg" >"$state/haproxy.log" 2>&1 &
echo $! >"$state/haproxy.pid"
# Ready once HAProxy answers and has a replica up (its checks run every
# 200 ms), so the first request after this script is not refused.
for _ in $(seq 1 150); do
    curl -sf "http://127.0.0.1:$lb_port/healthz" >/dev/null 2>&1 && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:$lb_port/healthz" >/dev/null 2>&1 \
    || { echo "HAProxy did not answer on $lb_port (see $state/haproxy.log)" >&2; exit 1; }
echo "load balancer: http://127.0.0.1:$lb_port"
