#!/usr/bin/env bash
# bench/cache.sh: the event cache, on against off, side by side.
#
# A consumer right behind a producer: each run first enqueues BACKLOG
# events (fewer than spindle.cache_size, so all of them can be cached),
# then a consumer pgbench drains them with spindle.dequeue(q, BATCH) while
# a producer pgbench keeps enqueueing (one event per transaction, at
# PRODUCER_RATE transactions/s: the cache is written while it is read).
# The consumer's rate is the events it dequeued divided by its run time.
# Rounds alternate: cache on (spindle.cache_size = 10000), cache off
# (spindle.cache_size = 0), on, off ... with a server restart in between
# (the setting takes effect at server start); the medians are printed, with
# the hit ratio of the "on" runs (from spindle.cache_stats) and the
# producer's rate.
#
# Each round also measures the consumer's CPU time per event, which the
# load of other processes on the machine disturbs much less than a rate:
# one session dequeues CYCLES x BACKLOG events (BATCH per transaction,
# committing each), another enqueues the BACKLOG before each cycle, and
# the consumer backend's utime + stime (/proc/<pid>/stat, so the server
# must run on this machine) is read around each cycle.
#
# CONSUMER_SYNC_COMMIT=off runs the consumer with synchronous_commit off,
# so that its rate shows the cost of a dequeue rather than of a WAL flush.
#
# Needs a server with spindle preloaded that this script may restart:
# PGDATA (its data directory), PGBIN (its binaries, default the system's),
# PGHOST, PGPORT, PGUSER (a superuser).  Creates and drops database
# spindle_cbench; leaves spindle.cache_size reset (ALTER SYSTEM RESET).
# Usage: [CYCLES=10] [CONSUMER_SYNC_COMMIT=on] bench/cache.sh [ROUNDS] [BATCH] [BACKLOG] [PRODUCER_RATE]
set -euo pipefail
ROUNDS=${1:-5}
BATCH=${2:-10}
BACKLOG=${3:-8000}
PRODUCER_RATE=${4:-200}
CONSUMER_SYNC_COMMIT=${CONSUMER_SYNC_COMMIT:-on}
CYCLES=${CYCLES:-10}
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
: "${PGDATA:?set PGDATA to the data directory of the server to restart}"
DB=spindle_cbench
PAYLOAD='{"type":"order","customer":12345,"items":[1,2,3],"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}'
tmp=$(mktemp -d)
chmod 755 "$tmp"
psql() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
q() { psql -At -d $DB -c "$*"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
cleanup() {
    rm -rf "$tmp"
    "$BIN/psql" -X -q -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    "$BIN/psql" -X -q -d postgres -c "ALTER SYSTEM RESET spindle.cache_size" >/dev/null 2>&1 || true
}
trap cleanup EXIT

restart_with() {   # restart_with CACHE_SIZE
    psql -d postgres -c "ALTER SYSTEM SET spindle.cache_size = $1" >/dev/null
    "$BIN/pg_ctl" -D "$PGDATA" -w -m fast restart >/dev/null
    [ "$(psql -At -d postgres -c 'SHOW spindle.cache_size')" = "$1" ]
}

psql -d postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
psql -d $DB >/dev/null <<SQL
CREATE EXTENSION spindle;
SELECT spindle.create_queue('cq', events_per_spindle => 50000);
SQL

cat > "$tmp/producer.sql" <<SQL
SELECT spindle.enqueue('cq', '$PAYLOAD');
SQL
cat > "$tmp/consumer.sql" <<SQL
SELECT count(*) FROM spindle.dequeue('cq', $BATCH);
SQL

# run: prints "consumer_events_per_s hits misses producer_tps"
run() {
    local xacts out pout pid t0 t1 h0 m0 h1 m1 left
    # drain whatever is left, then the backlog
    q "SELECT count(*) FROM spindle.dequeue('cq', 100000)" >/dev/null
    q "SELECT count(*) FROM spindle.enqueue_batch('cq', array_fill('$PAYLOAD'::jsonb, ARRAY[$BACKLOG]))" >/dev/null
    read -r h0 m0 < <(q "SELECT coalesce(sum(hits), 0), coalesce(sum(misses), 0) FROM spindle.cache_stats" | tr '|' ' ')
    xacts=$((BACKLOG / BATCH))
    "$BIN/pgbench" -n -M prepared -c 1 -j 1 -R "$PRODUCER_RATE" -T 600 \
        -f "$tmp/producer.sql" $DB >"$tmp/producer.out" 2>&1 &
    pid=$!
    t0=$(date +%s.%N)
    out=$(PGOPTIONS="-c synchronous_commit=$CONSUMER_SYNC_COMMIT" "$BIN/pgbench" -n -M prepared -c 1 -j 1 -t "$xacts" -f "$tmp/consumer.sql" $DB 2>&1)
    t1=$(date +%s.%N)
    kill -TERM $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
    read -r h1 m1 < <(q "SELECT coalesce(sum(hits), 0), coalesce(sum(misses), 0) FROM spindle.cache_stats" | tr '|' ' ')
    local tps
    tps=$(echo "$out" | awk '/^tps = / {print $3}')
    echo "$tps $BATCH $((h1 - h0)) $((m1 - m0)) $(awk -v a="$t0" -v b="$t1" -v r="$PRODUCER_RATE" 'BEGIN {print r}')" |
        awk '{printf "%.0f %d %d %s\n", $1 * $2, $3, $4, $5}'
}

# cpu: prints the consumer backend's CPU microseconds per event
cpu() {
    local script=$tmp/cpu.sql
    : > "$tmp/ticks"
    echo "SELECT count(*) FROM spindle.enqueue_batch('cq', array_fill('$PAYLOAD'::jsonb, ARRAY[$BACKLOG]));" > "$tmp/fill.sql"
    {
        echo "SELECT pg_backend_pid() AS pid \\gset"
        echo "\\setenv CONSUMER_PID :pid"
        echo "SET synchronous_commit = $CONSUMER_SYNC_COMMIT;"
        echo "SELECT count(*) FROM spindle.dequeue('cq', 100000);"
        for c in $(seq 1 "$CYCLES"); do
            echo "\\! $BIN/psql -X -q -At -d $DB -f $tmp/fill.sql >/dev/null"
            echo "\\! awk '{print \$14 + \$15}' /proc/\$CONSUMER_PID/stat >> $tmp/ticks"
            echo "DO \$\$ BEGIN FOR i IN 1..$((BACKLOG / BATCH)) LOOP PERFORM count(*) FROM spindle.dequeue('cq', $BATCH); COMMIT; END LOOP; END \$\$;"
            echo "\\! awk '{print \$14 + \$15}' /proc/\$CONSUMER_PID/stat >> $tmp/ticks"
        done
    } > "$script"
    psql -d $DB -f "$script" >/dev/null
    awk -v hz="$(getconf CLK_TCK)" -v ev="$BACKLOG" -v cycles="$CYCLES" \
        'NR % 2 == 1 {t0 = $1} NR % 2 == 0 {sum += $1 - t0}
         END {printf "%.2f\n", sum / hz * 1e6 / (ev * cycles)}' "$tmp/ticks"
}

: > "$tmp/on"
: > "$tmp/off"
for r in $(seq 1 "$ROUNDS"); do
    for mode in on off; do
        if [ $mode = on ]; then restart_with 10000; else restart_with 0; fi
        res=$(run)
        us=$(cpu)
        echo "round $r cache $mode: $res $us (events/s hits misses producer_rate cpu_us_per_event)"
        echo "$res $us" >> "$tmp/$mode"
    done
done

on=$(awk '{print $1}' "$tmp/on" | median)
off=$(awk '{print $1}' "$tmp/off" | median)
ratio=$(awk '{h += $2; m += $3} END {printf "%.4f", (h + m) ? h / (h + m) : 0}' "$tmp/on")
printf "\ndequeue(q, %d), backlog %d, producer %d/s, consumer synchronous_commit %s, %d rounds (medians):\n" \
    "$BATCH" "$BACKLOG" "$PRODUCER_RATE" "$CONSUMER_SYNC_COMMIT" "$ROUNDS"
con=$(awk '{print $5}' "$tmp/on" | median)
coff=$(awk '{print $5}' "$tmp/off" | median)
printf "  cache on:  %8d events/s   hit ratio %s   consumer CPU %s us/event\n" "$on" "$ratio" "$con"
printf "  cache off: %8d events/s                      consumer CPU %s us/event\n" "$off" "$coff"
awk -v a="$on" -v b="$off" -v c="$con" -v d="$coff" \
    'BEGIN {printf "  on / off:  rate %.2f, CPU per event %.2f\n", (b > 0 ? a / b : 0), (d > 0 ? c / d : 0)}'
