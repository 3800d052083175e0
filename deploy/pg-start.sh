#!/usr/bin/env bash
# Start a throw-away PostgreSQL cluster for plughost replicas: initdb into
# DIR/data (trust authentication, loopback only, no fsync), listening on
# 127.0.0.1:PORT with its socket in DIR, and a database "plughost" owned by
# the role "plughost". Debian's binaries (apt-get install postgresql); no
# system service is used. As root, the cluster runs as the "postgres" user
# (PostgreSQL refuses to run as root).
#
#   deploy/pg-start.sh DIR PORT      start (prints the URL on stdout)
#   deploy/pg-start.sh --stop DIR    stop it
#   deploy/pg-start.sh --start DIR PORT   start it again (its data kept)
set -euo pipefail

bindir=""
for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && bindir=$d
done
if [ -z "$bindir" ] && command -v initdb >/dev/null; then
    bindir=$(dirname "$(command -v initdb)")
fi
[ -n "$bindir" ] || { echo "pg-start: PostgreSQL's initdb not found (apt-get install -y postgresql)" >&2; exit 3; }

as_pg() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

if [ "${1:-}" = "--stop" ]; then
    dir=$2
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    exit 0
fi

if [ "${1:-}" = "--start" ]; then
    dir=$2
    port=$3
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 30 \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200" \
        start >/dev/null || { cat "$dir/postgres.log" >&2; exit 1; }
    exit 0
fi

dir=$1
port=$2
mkdir -p "$dir"
if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
    chmod 0755 "$dir"
    # Every directory above it must let the postgres user through.
    runuser -u postgres -- test -x "$dir" || {
        echo "pg-start: the postgres user cannot reach $dir (a parent directory is private, e.g. made by mktemp -d): chmod 0755 it or use another directory" >&2
        exit 1
    }
fi
as_pg "$bindir/initdb" -D "$dir/data" -A trust -U plughost --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 30 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200" \
    start >/dev/null || { cat "$dir/postgres.log" >&2; exit 1; }
as_pg "$bindir/createdb" -h 127.0.0.1 -p "$port" -U plughost plughost
echo "postgres://plughost@127.0.0.1:$port/plughost"
