#!/usr/bin/env bash
# bench/insert.sh: enqueue (single-row INSERT, one per transaction) into a
# heap table and a spindle table, side by side, with pgbench.
#
# Runs A/B alternately ROUNDS times for 1 and 4 clients, and prints the
# median events/s of each, their ratio, and WAL bytes per insert.  Needs a
# running server with spindle preloaded and the extension installed:
#   PGHOST/PGPORT/PGDATABASE select it (as for psql).
# Usage: bench/insert.sh [ROUNDS] [SECONDS]
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-10}
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PAYLOAD='{"type":"order","customer":12345,"items":[1,2,3],"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"

"$BIN/psql" -X -q -v ON_ERROR_STOP=1 <<SQL
DROP TABLE IF EXISTS bench_heap, bench_spindle;
CREATE TABLE bench_heap (id bigserial, body jsonb, enqueued_at timestamptz DEFAULT now());
CREATE TABLE bench_spindle (id bigserial, body jsonb, enqueued_at timestamptz DEFAULT now())
    USING spindle WITH (events_per_spindle = 50000);
SQL
for t in heap spindle; do
    echo "INSERT INTO bench_$t (body) VALUES ('$PAYLOAD');" > "$tmp/$t.sql"
done
chmod 644 "$tmp"/*.sql

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

for clients in 1 4; do
    : > "$tmp/heap.$clients"; : > "$tmp/spindle.$clients"
    for ((r = 1; r <= ROUNDS; r++)); do
        for t in heap spindle; do
            "$BIN/pgbench" -n -f "$tmp/$t.sql" -T "$SECS" -c "$clients" -j "$clients" 2>/dev/null |
                awk '/^tps =/ {print int($3)}' >> "$tmp/$t.$clients"
        done
    done
    h=$(median < "$tmp/heap.$clients"); s=$(median < "$tmp/spindle.$clients")
    printf 'enqueue %d client(s): heap %s events/s, spindle %s events/s, spindle/heap %.2f (median of %d)\n' \
        "$clients" "$h" "$s" "$(echo "$s / $h" | bc -l)" "$ROUNDS"
done

# WAL bytes per insert: 10000 single-row inserts in one transaction each side
for t in heap spindle; do
    before=$("$BIN/psql" -X -Atq -c "SELECT pg_current_wal_insert_lsn()")
    "$BIN/pgbench" -n -f "$tmp/$t.sql" -t 5000 -c 1 >/dev/null 2>&1
    after=$("$BIN/psql" -X -Atq -c "SELECT pg_current_wal_insert_lsn()")
    bytes=$("$BIN/psql" -X -Atq -c "SELECT pg_wal_lsn_diff('$after', '$before')")
    printf 'WAL per insert, %s: %.0f bytes\n' "$t" "$(echo "$bytes / 5000" | bc -l)"
done
"$BIN/psql" -X -q -c "DROP TABLE bench_heap, bench_spindle"
