#!/usr/bin/env bash
# bench/steady.sh: size of a queue under a steady load, heap (with
# autovacuum) against spindle (with its worker), one after the other in
# one run.
#
# For SECONDS each: a producer inserts RATE events/s (one per transaction),
# a consumer deletes the 10 oldest events per transaction (FOR UPDATE SKIP
# LOCKED through a btree on id) fast enough to keep up.  Every 10 s it
# prints the total size on disk of the table with its indexes (for
# spindle: the facade, its indexes and every spindle with its TOAST), and
# the backlog.  Needs a running server with spindle preloaded and the
# extension installed; PGHOST/PGPORT/PGDATABASE select it.
# Usage: bench/steady.sh [SECONDS] [RATE]
set -euo pipefail
SECS=${1:-120}
RATE=${2:-1000}
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PAYLOAD='{"type":"order","customer":12345,"items":[1,2,3],"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}'
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
psql() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }

psql <<SQL
DROP TABLE IF EXISTS steady_heap, steady_spindle;
CREATE TABLE steady_heap (id bigserial PRIMARY KEY, body jsonb);
CREATE TABLE steady_spindle (id bigserial PRIMARY KEY, body jsonb)
    USING spindle WITH (events_per_spindle = 10000);
SQL

size_sql() {
    case $1 in
    heap) echo "SELECT pg_total_relation_size('steady_heap')" ;;
    spindle) echo "SELECT pg_total_relation_size('steady_spindle') +
                  coalesce((SELECT size_bytes FROM spindle.tables
                             WHERE relation = 'steady_spindle'::regclass), 0)" ;;
    esac
}

for t in heap spindle; do
    echo "INSERT INTO steady_$t (body) VALUES ('$PAYLOAD');" > "$tmp/produce_$t.sql"
    echo "DELETE FROM steady_$t WHERE id IN (SELECT id FROM steady_$t ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED);" \
        > "$tmp/consume_$t.sql"
done
chmod 644 "$tmp"/*.sql

for t in heap spindle; do
    echo "== $t: $RATE events/s for $SECS s"
    "$BIN/pgbench" -n -f "$tmp/produce_$t.sql" -R "$RATE" -T "$SECS" -c 2 -j 2 \
        >"$tmp/produce_$t.log" 2>&1 &
    prod=$!
    # the consumer runs at up to 1.5x the produce rate (10 events per call)
    "$BIN/pgbench" -n -f "$tmp/consume_$t.sql" -R $((RATE * 3 / 20)) -T "$SECS" -c 1 \
        >"$tmp/consume_$t.log" 2>&1 &
    cons=$!
    for ((s = 10; s <= SECS; s += 10)); do
        sleep 10
        printf '  t=%3ds size %8.2f MiB  backlog %6s events\n' "$s" \
            "$(echo "$(psql -Atc "$(size_sql "$t")") / 1048576" | bc -l)" \
            "$(psql -Atc "SELECT count(*) FROM steady_$t")"
    done
    wait "$prod" "$cons" || true
    printf '  produced %s tps, consumed %s tps (10 events each)\n' \
        "$(awk '/^tps =/ {print int($3)}' "$tmp/produce_$t.log")" \
        "$(awk '/^tps =/ {print int($3)}' "$tmp/consume_$t.log")"
done
psql -c "DROP TABLE steady_heap, steady_spindle"
