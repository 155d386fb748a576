#!/usr/bin/env bash
# bench/queue_quick.sh: a quick side-by-side of the spindle queue API and
# a heap FOR UPDATE SKIP LOCKED queue (the full harness is bench issue 9).
#
# For each case, ROUNDS alternating runs (heap, spindle, heap, spindle ...)
# of SECS seconds with pgbench, in one database, and the medians:
#
#   enqueue                 one event per transaction, CLIENTS clients
#   dequeue 1               one event per transaction, CLIENTS consumers
#   dequeue 10              ten events per transaction, CLIENTS consumers
#   dequeue 100, 1 client   a hundred per transaction, one consumer
#   commit ceiling          a one-row INSERT into an empty heap table per
#                           transaction, CLIENTS clients (the most any
#                           one-event-per-transaction queue can do)
#
# and the WAL each writes per event (pg_current_wal_lsn before and after a
# run, divided by the events it moved).  The queues are refilled before
# each dequeue run so consumers never run dry.  Payload: ~120 bytes jsonb.
#
# Needs a running server with spindle preloaded and a superuser; PGHOST,
# PGPORT, PGUSER select it.  Creates and drops database spindle_qbench.
# Usage: bench/queue_quick.sh [ROUNDS] [SECS] [CLIENTS]
set -euo pipefail
ROUNDS=${1:-3}
SECS=${2:-5}
CLIENTS=${3:-4}
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
DB=spindle_qbench
PAYLOAD='{"type":"order","customer":12345,"items":[1,2,3],"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}'
tmp=$(mktemp -d)
chmod 755 "$tmp"
trap 'rm -rf "$tmp"; "$BIN/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1' EXIT
psql() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
q() { psql -At -d $DB -c "$*"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

psql -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
psql -d $DB <<SQL
CREATE EXTENSION spindle;
SELECT spindle.create_queue('bq', events_per_spindle => 10000);
CREATE TABLE hq (id bigserial PRIMARY KEY, enqueued_at timestamptz NOT NULL DEFAULT now(),
                 payload jsonb NOT NULL);
CREATE TABLE ceiling (id int);
SQL

cat > "$tmp/enq_heap.sql" <<SQL
INSERT INTO hq (payload) VALUES ('$PAYLOAD');
SQL
cat > "$tmp/enq_spindle.sql" <<SQL
SELECT spindle.enqueue('bq', '$PAYLOAD');
SQL
for n in 1 10 100; do
    cat > "$tmp/deq${n}_heap.sql" <<SQL
WITH c AS (SELECT id FROM hq ORDER BY id LIMIT $n FOR UPDATE SKIP LOCKED)
DELETE FROM hq USING c WHERE hq.id = c.id RETURNING hq.id, hq.payload;
SQL
    cat > "$tmp/deq${n}_spindle.sql" <<SQL
SELECT * FROM spindle.dequeue('bq', $n);
SQL
done
echo "INSERT INTO ceiling VALUES (1);" > "$tmp/ceiling.sql"

refill() {   # refill N: both queues hold at least N events
    q "INSERT INTO hq (payload) SELECT '$PAYLOAD' FROM generate_series(1, $1)" >/dev/null
    q "SELECT count(*) FROM spindle.enqueue_batch('bq', array_fill('$PAYLOAD'::jsonb, ARRAY[$1]))" >/dev/null
    q "VACUUM hq" >/dev/null
}

# run SCRIPT CLIENTS EVENTS_PER_XACT: prints "events/s wal_bytes_per_event"
run() {
    local script=$1 clients=$2 per=$3 out lsn0 lsn1 tps
    lsn0=$(q "SELECT pg_current_wal_insert_lsn()")
    out=$("$BIN/pgbench" -n -M prepared -c "$clients" -j "$clients" -T "$SECS" -f "$script" $DB 2>&1)
    lsn1=$(q "SELECT pg_current_wal_insert_lsn()")
    tps=$(echo "$out" | awk '/^tps = / {print $3}')
    local xacts
    xacts=$(echo "$out" | awk '/number of transactions actually processed/ {print $6}' | cut -d/ -f1)
    local bytes
    bytes=$(q "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
    echo "$tps $per $xacts $bytes" | awk '{printf "%.0f %.0f\n", $1 * $2, ($3 > 0 ? $4 / ($3 * $2) : 0)}'
}

declare -A rate wal
case_run() {   # case_run NAME HEAPSCRIPT SPINDLESCRIPT CLIENTS PER REFILL
    local name=$1 h=$2 s=$3 c=$4 per=$5 fill=$6 i r
    for ((i = 0; i < ROUNDS; i++)); do
        for kind in heap spindle; do
            ((fill > 0)) && refill "$fill"
            if [[ $kind == heap ]]; then r=$(run "$h" "$c" "$per"); else r=$(run "$s" "$c" "$per"); fi
            echo "$r" | awk '{print $1}' >> "$tmp/$name.$kind.rate"
            echo "$r" | awk '{print $2}' >> "$tmp/$name.$kind.wal"
        done
    done
    for kind in heap spindle; do
        rate[$name.$kind]=$(median < "$tmp/$name.$kind.rate")
        wal[$name.$kind]=$(median < "$tmp/$name.$kind.wal")
    done
    printf '%-22s heap %8s ev/s %5s B/ev | spindle %8s ev/s %5s B/ev | ratio %s\n' "$name" \
        "${rate[$name.heap]}" "${wal[$name.heap]}" "${rate[$name.spindle]}" "${wal[$name.spindle]}" \
        "$(echo "${rate[$name.spindle]} ${rate[$name.heap]}" | awk '{printf "%.2f", ($2 > 0 ? $1 / $2 : 0)}')"
}

echo "== $ROUNDS rounds of $SECS s, $CLIENTS clients, medians"
for ((i = 0; i < ROUNDS; i++)); do run "$tmp/ceiling.sql" "$CLIENTS" 1 | awk '{print $1}' >> "$tmp/ceiling.rate"; done
printf '%-22s %8s commits/s\n' "commit ceiling" "$(median < "$tmp/ceiling.rate")"
case_run enqueue "$tmp/enq_heap.sql" "$tmp/enq_spindle.sql" "$CLIENTS" 1 0
case_run "dequeue 1" "$tmp/deq1_heap.sql" "$tmp/deq1_spindle.sql" "$CLIENTS" 1 $((SECS * 12000))
case_run "dequeue 10" "$tmp/deq10_heap.sql" "$tmp/deq10_spindle.sql" "$CLIENTS" 10 $((SECS * 60000))
case_run "dequeue 100, 1 client" "$tmp/deq100_heap.sql" "$tmp/deq100_spindle.sql" 1 100 $((SECS * 80000))
