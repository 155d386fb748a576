#!/usr/bin/env bash
# Build and install spindle, then run scripts/demo.sql on a throwaway
# PostgreSQL 15 cluster (temp dir, private unix socket, no TCP), and remove
# the cluster afterwards.
#
#   sudo ./scripts/demo.sh      # on a fresh Debian bookworm machine
#   ./scripts/demo.sh           # as an ordinary user (sudo for apt/make install)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=/usr/lib/postgresql/15/bin

bash "$ROOT/scripts/build.sh"

# PostgreSQL refuses to run as root: as root, run the server as `postgres`.
if [[ $(id -u) -eq 0 ]]; then
    if ! id postgres >/dev/null 2>&1; then
        echo "demo.sh: user 'postgres' does not exist (is postgresql-15 installed?)" >&2
        exit 1
    fi
    AS_PG=(runuser -u postgres --)
else
    AS_PG=()
fi

# Do not let the caller's PG* environment redirect psql or pg_ctl.
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGDATA PGSERVICE PGOPTIONS

WORK=$(mktemp -d "${TMPDIR:-/tmp}/spindle-demo.XXXXXX")
chmod 700 "$WORK"
if [[ $(id -u) -eq 0 ]]; then
    chown postgres:postgres "$WORK"
fi
DATA=$WORK/data
LOG=$WORK/server.log

cleanup() {
    local rc=$?
    if [[ -f $DATA/postmaster.pid ]]; then
        echo "demo.sh: stopping the demo cluster"
        "${AS_PG[@]}" "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 ||
            "${AS_PG[@]}" "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    if ((rc != 0)) && [[ -f $LOG ]]; then
        echo "demo.sh: FAILED (exit $rc); last lines of the server log:" >&2
        tail -n 40 "$LOG" >&2 || true
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_in_use() {
    local p=$1
    # A TCP listener on localhost, or a unix socket in a usual place.
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        return 0
    fi
    [[ -e /tmp/.s.PGSQL.$p || -e /var/run/postgresql/.s.PGSQL.$p ]]
}
PORT=54329
while port_in_use "$PORT"; do
    PORT=$((PORT + 1))
    if ((PORT > 54429)); then
        echo "demo.sh: no free port in 54329-54429" >&2
        exit 1
    fi
done

echo "demo.sh: creating a throwaway cluster in $DATA (port $PORT)"
"${AS_PG[@]}" "$BIN/initdb" -D "$DATA" -A trust -E UTF8 --locale=C --no-sync >"$WORK/initdb.log" 2>&1 || {
    cat "$WORK/initdb.log" >&2
    exit 1
}

"${AS_PG[@]}" tee -a "$DATA/postgresql.conf" >/dev/null <<CONF

# --- spindle demo ---
shared_preload_libraries = 'spindle'
port = $PORT
listen_addresses = ''
unix_socket_directories = '$WORK'
# The demo drops spindles itself with spindle.drop_spindles() so that each
# step shows a predictable state; normally the background worker does it
# every spindle.naptime.
spindle.enable_worker = off
CONF

"${AS_PG[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null
echo "demo.sh: server started"

# psql reads the script from the temp dir, which `postgres` can read.
cp "$ROOT/scripts/demo.sql" "$WORK/demo.sql"
if [[ $(id -u) -eq 0 ]]; then
    chown postgres:postgres "$WORK/demo.sql"
fi

echo "demo.sh: running scripts/demo.sql"
echo
"${AS_PG[@]}" "$BIN/psql" -X -v ON_ERROR_STOP=1 -e \
    -h "$WORK" -p "$PORT" -d postgres -f "$WORK/demo.sql"
echo
echo "demo.sh: demo finished"
