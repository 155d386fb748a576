# bench/lib.sh: the throwaway cluster and small helpers shared by the
# by-hand benchmarks (bench/stragglers.sh, wal_checkpoint.sh, queues.sh, sparse.sh,
# backlog.sh).  Sourced, not run.  The caller sets NAME (for messages) and
# PORT, and may set EXTRA_CONF (lines appended to postgresql.conf); the user
# may add lines of their own with BENCH_CONF (e.g. a spindle setting).
#
# cluster_start: initdb (with BENCH_INITDB_OPTS, e.g. -k for data checksums)
# in a new temp dir ($tmp), unix socket only, as user
# postgres when run as root; measures the shared memory of a server without
# spindle ($shm_without), then starts it with spindle preloaded and creates
# database "bench" with the extension.  The cluster and the temp dir are
# removed at exit unless BENCH_KEEP=1.  Only the PostgreSQL installation's
# programs (PG_CONFIG) are used.

PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PAYLOAD='{"type":"order","customer":12345,"items":[1,2,3],"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}'
BIN=$("$PG_CONFIG" --bindir)
fail() { echo "bench/$NAME: $*" >&2; exit 1; }
[[ -f $("$PG_CONFIG" --pkglibdir)/spindle.so ]] ||
    fail "spindle is not installed in $("$PG_CONFIG" --pkglibdir): make install PG_CONFIG=$PG_CONFIG first"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/spindle-$NAME.XXXXXX")
chmod 755 "$tmp"
if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || fail "user postgres does not exist"
    chown postgres: "$tmp"
    AS_PG=(runuser -u postgres --)
else
    AS_PG=()
fi
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGDATA PGSERVICE PGOPTIONS
export PGHOST=$tmp PGPORT=$PORT PGDATABASE=bench
cleanup() {
    set +e
    if [[ -f $tmp/data/postmaster.pid ]]; then
        "${AS_PG[@]}" "$BIN/pg_ctl" -D "$tmp/data" -m immediate stop >/dev/null 2>&1
    fi
    if [[ -z ${BENCH_KEEP:-} ]]; then rm -rf "$tmp"; else echo "work dir kept: $tmp"; fi
}
trap cleanup EXIT

# (BENCH_PGOPTIONS: settings of one call's session, e.g. spindle.consume_log)
psql() { "${AS_PG[@]}" env PGHOST="$PGHOST" PGPORT="$PGPORT" PGOPTIONS="-c client_min_messages=warning ${BENCH_PGOPTIONS:-}" "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
q() { psql -At -d "$PGDATABASE" -c "$*"; }
# q_try SQL: like q, but an error is printed on stdout as "ERROR: ..." and
# the status is that of psql
q_try() { psql -At -d "$PGDATABASE" -c "$*" 2>&1; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }
# calc EXPR [FORMAT]: EXPR in floating point (awk), printed with FORMAT
# (default %.2f)
calc() { awk "BEGIN { printf \"${2:-%.2f}\\n\", ($1) }"; }
since() { calc "$(now) - $1" %.1f; }
pgctl() { "${AS_PG[@]}" "$BIN/pg_ctl" -D "$tmp/data" -l "$tmp/server.log" -w "$@" >/dev/null; }
# lsn: the current WAL insert position, in bytes
lsn() { q "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"; }
# file F: a file in $tmp the server's user may read
wfile() { touch "$tmp/$1"; chmod 644 "$tmp/$1"; echo "$tmp/$1"; }
SHM_TOTAL="SELECT sum(allocated_size) FROM pg_shmem_allocations WHERE name IS NOT NULL"
SHM_SPINDLE="SELECT sum(allocated_size) FROM pg_shmem_allocations WHERE name LIKE 'spindle%'"

cluster_start() {
    # shellcheck disable=SC2086
    "${AS_PG[@]}" "$BIN/initdb" -D "$tmp/data" -U postgres -A trust ${BENCH_INITDB_OPTS:-} >/dev/null
    cat >> "$tmp/data/postgresql.conf" <<CONF
port = $PORT
listen_addresses = ''
unix_socket_directories = '$tmp'
${EXTRA_CONF:-}
${BENCH_CONF:-}
CONF
    pgctl start
    shm_without=$(psql -At -d postgres -c "$SHM_TOTAL")
    pgctl stop
    echo "shared_preload_libraries = 'spindle'" >> "$tmp/data/postgresql.conf"
    pgctl start
    psql -d postgres -c "CREATE DATABASE bench"
    q "CREATE EXTENSION spindle"
}

# header: one line naming the commit, the server and the date
header() {
    echo "== bench/$NAME: spindle $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')," \
        "PostgreSQL $("$BIN/postgres" -V | awk '{print $3}'), $(date -u '+%F %H:%M') UTC; $*"
}

# queue_bytes Q: what a queue occupies on disk: the sum of size_bytes of its
# spindles (spindle.spindles: each spindle is a relation of its own, which
# pg_total_relation_size of the queue's table does not count), plus
# pg_total_relation_size of the queue's table (its facade, indexes, TOAST)
# and of its consumer relation pg_spindle.c<oid>
queue_bytes() {
    q "SELECT coalesce((SELECT sum(size_bytes) FROM spindle.spindles
                         WHERE relation = 'spindle_q.$1'::regclass), 0)
              + pg_total_relation_size('spindle_q.$1')
              + coalesce(pg_total_relation_size(to_regclass('pg_spindle.c'
                                                || 'spindle_q.$1'::regclass::oid)), 0)"
}
