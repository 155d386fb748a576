#!/usr/bin/env bash
# bench/scale.sh: does a spindle table cost the same with 10 and with 10 000
# spindles?  Measures, side by side and alternating, ROUNDS times, and
# prints the medians and their ratio (10 000 / 10; flat means at most 2):
#
#   insert, new spindle every 10  single-row INSERTs (one per transaction,
#                                 pgbench -t 200, one client) with
#                                 events_per_spindle = 10: one in ten
#                                 creates the next spindle
#   insert into the open spindle  the same, pgbench -T, into a spindle of
#                                 capacity 1 000 000 (no spindle created)
#   insert, first of a session    the same with pgbench -C: a new session
#                                 for each insert (connecting not counted)
#   planning                      "Planning Time" of EXPLAIN (SUMMARY)
#                                 SELECT * FROM t WHERE id = 1, median of
#                                 PLANS (default 200) in one session
#   index fetch                   SELECT * FROM t WHERE id = <random live
#                                 id>, pgbench -T, simple protocol (parse,
#                                 plan, execute) and -M prepared
#   enqueue + dequeue of one      spindle.enqueue then spindle.dequeue of
#                                 one event per transaction (pgbench -T) on
#                                 a queue of 100 / 100 000 events, 10 per
#                                 spindle (so 10 / 10 000 spindles of
#                                 events waiting)
#   drop_spindles, nothing to do  SELECT spindle.drop_spindles('t') with no
#                                 droppable spindle (pgbench -T)
#   drop_spindles, drops one      after deleting the oldest spindle's 10
#                                 events
#   retire, per spindle retired   the call that removes dropped spindles'
#                                 index entries (one pass over the index,
#                                 once a tenth of the table is dropped),
#                                 divided by the spindles it retires
#   retire, the whole pass        that call (O(index), as heap's index
#                                 vacuum: expected to grow)
#   VACUUM t                      (pgbench -T)
#   worker round                  spindle.worker.last_run deltas minus
#                                 spindle.naptime (100ms for the run),
#                                 sampled for WORKER_SECS
#
# The two spindle tables t, "s10" (10 full spindles, 100 events) and "s10k"
# (10 000 full spindles, 100 000 events), events_per_spindle = 10 with a
# btree on id, are made in two databases of their own, spindle_scale_10 and
# spindle_scale_10k, so that each has its own worker and the worker rounds
# can be told apart.  Next to each, a heap table h with as many rows is
# measured the same way where it has the same operation: its ratio is what
# the larger data alone costs (a deeper btree, more pages), so a spindle
# ratio well above the heap one is the cost of the spindles.  Both databases
# are dropped at the end (DROP TABLE of a table with 10 000 spindles would
# need some 50 000 locks: a spindle, its TOAST table and index and its two
# row types each take one; DROP DATABASE takes none).  Each round appends 200
# events, then consumes (deletes) the 200 oldest and drops their spindles,
# as a queue does, so both tables keep their number of spindles.
#
# pgbench figures are the mean latency of every transaction of the run but
# the first, from its per-transaction log (-l).
#
# Needs a running server with spindle preloaded, a superuser (CREATE
# DATABASE, ALTER SYSTEM for the worker, spindle.worker); PGHOST, PGPORT and
# PGUSER select it, PGDATABASE the database to connect to for the
# administrative commands.  The worker is turned off but for the worker
# phase, and spindle.enable_worker / spindle.naptime are put back as they
# were at the end.  Only psql and pgbench are used.
# Usage: bench/scale.sh [ROUNDS] [SECONDS] [WORKER_SECS]
set -euo pipefail
ROUNDS=${1:-5}
SECS=${2:-3}
WORKER_SECS=${3:-10}
PLANS=${PLANS:-200}
NAPTIME_MS=100
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PAYLOAD='{"type":"order","customer":12345,"items":[1,2,3],"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}'
DB10=spindle_scale_10
DB10K=spindle_scale_10k
tmp=$(mktemp -d)
chmod 755 "$tmp"
psql() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
q() { local db=$1; shift; psql -At -d "$db" -c "$*"; }
admin() { psql -At -c "$*"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# ---- worker settings: remember what ALTER SYSTEM had, put it back at exit
auto_setting() {
    admin "SELECT setting FROM pg_file_settings
            WHERE name = '$1' AND sourcefile LIKE '%postgresql.auto.conf'
            ORDER BY seqno DESC LIMIT 1"
}
orig_enable=$(auto_setting spindle.enable_worker)
orig_naptime=$(auto_setting spindle.naptime)
restore_setting() {
    if [[ -n $2 ]]; then admin "ALTER SYSTEM SET $1 = '$2'"; else admin "ALTER SYSTEM RESET $1"; fi
}
worker() {     # worker on|off
    admin "ALTER SYSTEM SET spindle.enable_worker = $1"
    admin "ALTER SYSTEM SET spindle.naptime = '${NAPTIME_MS}ms'"
    admin "SELECT pg_reload_conf()" >/dev/null
    sleep 1
}
cleanup() {
    set +e
    kill $(jobs -p) 2>/dev/null
    restore_setting spindle.enable_worker "$orig_enable"
    restore_setting spindle.naptime "$orig_naptime"
    admin "SELECT pg_reload_conf()" >/dev/null
    admin "DROP DATABASE IF EXISTS $DB10 WITH (FORCE)"
    admin "DROP DATABASE IF EXISTS $DB10K WITH (FORCE)"
    rm -rf "$tmp"
}
trap cleanup EXIT
worker off

# ---- the tables
fill() {       # fill DB EVENTS: appends to t in transactions of 1000 events
    local db=$1 n=$2 done=0 t0 t1
    while ((done < n)); do
        local batch=$((n - done < 1000 ? n - done : 1000))
        t0=$(date +%s%N)
        q "$db" "INSERT INTO t (body) SELECT '$PAYLOAD' FROM generate_series(1, $batch)" >/dev/null
        t1=$(date +%s%N)
        # the first and the last batch: how the cost of creating spindles grows
        if ((done == 0 || done + batch == n)); then
            printf '  %s: spindles %5d..%5d created in %6.0f ms, %.2f ms per spindle\n' \
                "$db" $((done / 10 + 1)) $(((done + batch) / 10)) \
                "$(echo "($t1 - $t0) / 1000000" | bc -l)" \
                "$(echo "($t1 - $t0) / 1000000 / ($batch / 10)" | bc -l)"
        fi
        done=$((done + batch))
    done
    q "$db" "INSERT INTO h (body) SELECT '$PAYLOAD' FROM generate_series(1, $n)" >/dev/null
}
echo "== setup: s10 (100 events) and s10k (100 000 events), events_per_spindle = 10"
for db in $DB10 $DB10K; do
    admin "DROP DATABASE IF EXISTS $db WITH (FORCE)"
    admin "CREATE DATABASE $db"
    psql -d "$db" <<SQL
CREATE EXTENSION spindle;
CREATE TABLE t (id bigserial PRIMARY KEY, body jsonb) USING spindle
    WITH (events_per_spindle = 10);
CREATE TABLE h (id bigserial PRIMARY KEY, body jsonb) USING heap;
SELECT spindle.create_queue('q', events_per_spindle => 10);
SQL
done
fill $DB10 100
t0=$(date +%s)
fill $DB10K 100000
# the queue q: 100 and 100 000 events waiting, 10 per spindle
q $DB10 "SELECT spindle.enqueue_batch('q', array_agg('$PAYLOAD'::jsonb)) FROM generate_series(1, 100)" >/dev/null
for ((i = 0; i < 100; i++)); do
    q $DB10K "SELECT spindle.enqueue_batch('q', array_agg('$PAYLOAD'::jsonb)) FROM generate_series(1, 1000)" >/dev/null
done
echo "  s10k filled in $(( $(date +%s) - t0 )) s"
for db in $DB10 $DB10K; do
    q "$db" "VACUUM ANALYZE t"
    q "$db" "VACUUM ANALYZE h"
    printf '  %s: %s spindles, %s events; heap: %s rows\n' "$db" \
        "$(q "$db" "SELECT count(*) FROM spindle.spindles")" "$(q "$db" "SELECT count(*) FROM t")" \
        "$(q "$db" "SELECT count(*) FROM h")"
done

# ---- pgbench scripts, for t and for h
for x in t h; do
    echo "INSERT INTO $x (body) VALUES ('$PAYLOAD');" > "$tmp/insert_$x.sql"
    echo "VACUUM $x;" > "$tmp/vacuum_$x.sql"
    printf '\\set id random(:lo, :hi)\nSELECT * FROM %s WHERE id = :id;\n' $x > "$tmp/fetch_$x.sql"
    for ((i = 0; i < PLANS; i++)); do
        echo "EXPLAIN (SUMMARY) SELECT * FROM $x WHERE id = 1;"
    done > "$tmp/plan_$x.sql"
done
echo "SELECT spindle.drop_spindles('t');" > "$tmp/drop.sql"
# one dequeue per transaction, and an enqueue to keep the backlog's size
printf "SELECT spindle.enqueue('q', '%s');\nSELECT msg_id FROM spindle.dequeue('q');\n" "$PAYLOAD" > "$tmp/dequeue.sql"
chmod 644 "$tmp"/*.sql

# mean latency (ms) of the transactions of a pgbench run but the first (a
# new session's first call pays for cold caches; "-C" measures that)
bench() {
    local db=$1
    shift
    rm -f "$tmp"/pglog*
    "$BIN/pgbench" -n -c 1 -l --log-prefix="$tmp/pglog" "$@" "$db" >/dev/null 2>&1
    cat "$tmp"/pglog* | awk 'NR > 1 {s += $3; n++} END {printf "%.4f\n", n ? s / n / 1000 : 0}'
}
# "result time_ms" of each statement after the first line of STMTS, in one
# session that ran the first line untimed (so its caches are warm)
timed() {
    local db=$1 stmts=$2
    psql -At -d "$db" <<SQL | awk '/^Time:/ {print v, $2; next} {v = $1}'
${stmts%%$'\n'*}
\\timing on
${stmts#*$'\n'}
SQL
}
consume() {    # delete the N oldest events
    q "$1" "DELETE FROM t WHERE id IN (SELECT id FROM t ORDER BY id LIMIT $2)" >/dev/null
}
rec() { echo "$3" >> "$tmp/$1.$2"; }
plan_ms() { psql -d "$1" -At -f "$tmp/plan_$2.sql" | awk '/^Planning Time/ {print $3}' | median; }
fetch() {      # fetch DB X [pgbench options]: random live ids of X
    local db=$1 x=$2 lo hi
    shift 2
    read -r lo hi <<<"$(q "$db" "SELECT min(id), max(id) FROM $x" | tr '|' ' ')"
    bench "$db" -f "$tmp/fetch_$x.sql" -T "$SECS" -D lo="$lo" -D hi="$hi" "$@"
}

# Retiring: dropped spindles' index entries are removed in one pass over
# the index once their slots are a tenth of the live ones' (maintenance.c,
# retire_due).  Drop a tenth of the table, time the call that retires them,
# and count it per spindle retired; then append as many events again.
retire_round() {
    local db=$1 live before after n ms i retired=0
    live=$(q $db "SELECT count(*) FROM t")
    consume $db $((live / 10 + 10))
    for ((i = 0; i < 20 && retired == 0; i++)); do
        before=$(waiting $db)
        read -r n ms <<<"$(timed $db "SELECT 1;
SELECT spindle.drop_spindles('t');")"
        after=$(waiting $db)
        if ((before + n > after)); then
            retired=$((before + n - after))
            rec retire_one $db "$(echo "$ms / $retired" | bc -l)"
            rec retire_pass $db "$ms"
        fi
    done
    ((retired > 0)) || echo "  warning: $db: no call retired the dropped spindles"
    q $db "INSERT INTO t (body) SELECT '$PAYLOAD' FROM generate_series(1, $((live / 10 + 10)))" >/dev/null
}
waiting() {    # dropped spindles whose index entries are still to be removed
    q $1 "SELECT count(*) FROM spindle.spindle_catalog
           WHERE relation = 't'::regclass AND dropped_at IS NOT NULL"
}

names=(insert_new insert_open insert_conn plan fetch fetch_prep dequeue drop_none drop_one retire_one retire_pass vacuum worker)
declare -A label=(
    [insert_new]="insert, new spindle every 10"
    [insert_open]="insert into the open spindle"
    [insert_conn]="insert, first of a session"
    [plan]="planning, SELECT by id"
    [fetch]="index fetch, simple protocol"
    [fetch_prep]="index fetch, prepared"
    [dequeue]="enqueue + dequeue of one event"
    [drop_none]="drop_spindles, nothing to do"
    [drop_one]="drop_spindles, drops one"
    [retire_one]="retire, per spindle retired"
    [retire_pass]="retire, the whole pass"
    [vacuum]="VACUUM"
    [worker]="worker round"
)

echo "== $ROUNDS rounds, alternating"
for ((r = 1; r <= ROUNDS; r++)); do
    for db in $DB10 $DB10K; do
        rec insert_new $db "$(bench $db -f "$tmp/insert_t.sql" -t 200)"
        consume $db 190
        q $db "SELECT spindle.drop_spindles('t')" >/dev/null     # drops 19
        q $db "SELECT spindle.drop_spindles('t')" >/dev/null     # retires them
        # in a session that called drop_spindles once: warm caches
        timed $db "SELECT spindle.drop_spindles('t'); DELETE FROM t WHERE id IN (SELECT id FROM t ORDER BY id LIMIT 10);
SELECT spindle.drop_spindles('t');" > "$tmp/timed"
        { read -r n ms; } < "$tmp/timed"
        [[ $n == 1 ]] || echo "  warning: $db: drop_spindles dropped $n spindles, not 1"
        rec drop_one $db "$ms"
        retire_round $db
        rec drop_none $db "$(bench $db -f "$tmp/drop.sql" -T "$SECS")"
        rec dequeue $db "$(bench $db -f "$tmp/dequeue.sql" -T "$SECS")"
        for x in t h; do
            rec vacuum $db.$x "$(bench $db -f "$tmp/vacuum_$x.sql" -T "$SECS")"
            rec plan $db.$x "$(plan_ms $db $x)"
            rec fetch $db.$x "$(fetch $db $x)"
            rec fetch_prep $db.$x "$(fetch $db $x -M prepared)"
        done
    done
    echo "  round $r/$ROUNDS done"
done
for m in insert_new drop_none drop_one retire_one retire_pass dequeue; do
    for db in $DB10 $DB10K; do mv "$tmp/$m.$db" "$tmp/$m.$db.t"; done
done

# inserts that never create a spindle: the next spindle holds 1 000 000
for db in $DB10 $DB10K; do
    q $db "ALTER TABLE t SET (events_per_spindle = 1000000)"
    q $db "INSERT INTO t (body) SELECT '$PAYLOAD' FROM generate_series(1, 20)" >/dev/null
done
for ((r = 1; r <= ROUNDS; r++)); do
    for db in $DB10 $DB10K; do
        for x in t h; do
            rec insert_open $db.$x "$(bench $db -f "$tmp/insert_$x.sql" -T "$SECS")"
            rec insert_conn $db.$x "$(bench $db -f "$tmp/insert_$x.sql" -T "$SECS" -C)"
        done
    done
done

# worker rounds: both workers run at once; each database's last_run moves
# once per round, and a round is followed by spindle.naptime of sleep
worker on
for db in $DB10 $DB10K; do
    for ((i = 0; i < 100; i++)); do
        [[ -n $(q $db "SELECT last_run FROM spindle.worker WHERE database = current_database()") ]] && break
        sleep 0.2
    done
done
sleep 2     # the first round counts every spindle: not a steady round
for ((r = 1; r <= ROUNDS; r++)); do
    for db in $DB10 $DB10K; do
        timeout "$WORKER_SECS" "$BIN/psql" -X -At -d $db \
            <<<"SELECT extract(epoch FROM last_run) FROM spindle.worker WHERE database = current_database() \\watch 0.01" \
            > "$tmp/lastrun" || true
        uniq "$tmp/lastrun" | awk -v nap=$NAPTIME_MS 'NR > 1 {print ($1 - prev) * 1000 - nap} {prev = $1}' \
            > "$tmp/rounds"
        rec worker $db.t "$(median < "$tmp/rounds")"
        sort -n "$tmp/rounds" | tail -1 >> "$tmp/worker_max.$db"
    done
done
worker off
for db in $DB10 $DB10K; do
    printf '  %s after the run: %s spindles; slowest worker round %.1f ms\n' "$db" \
        "$(q $db "SELECT count(*) FROM spindle.spindles")" "$(sort -n "$tmp/worker_max.$db" | tail -1)"
done

echo
echo "== medians of $ROUNDS rounds, ms; ratio = 10 000 spindles / 10 spindles;"
echo "   heap: a heap table with as many rows (100 / 100 000), where it applies"
printf '%-32s %10s %10s %7s   %10s %10s %7s\n' metric "10 sp." "10 000 sp." ratio "heap 100" "heap 100k" ratio
for m in "${names[@]}"; do
    a=$(median < "$tmp/$m.$DB10.t"); b=$(median < "$tmp/$m.$DB10K.t")
    printf '%-32s %10.3f %10.3f %7.2f' "${label[$m]}" "$a" "$b" \
        "$(echo "if ($a > 0) $b / $a else 0" | bc -l)"
    if [[ -s $tmp/$m.$DB10.h ]]; then
        a=$(median < "$tmp/$m.$DB10.h"); b=$(median < "$tmp/$m.$DB10K.h")
        printf '   %10.3f %10.3f %7.2f' "$a" "$b" "$(echo "if ($a > 0) $b / $a else 0" | bc -l)"
    fi
    echo
done
