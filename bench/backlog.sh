#!/usr/bin/env bash
# bench/backlog.sh (make bench-backlog): does a large backlog make a
# consumer call dearer, refuse producers, or leave the queue large once
# drained (issue 19)?
#
#   fill      BENCH_EVENTS events into queue bq (spindle's default
#             events_per_spindle), 10 000 per enqueue_batch, one transaction
#             each, none consumed; an enqueue that fails is counted (refused)
#   start     dequeue(bq, 100) at the start of the drain against
#             dequeue(sq, 100) on a queue kept at a 1 000-event backlog: ROUNDS
#             rounds, alternating (ABBA), each a pgbench run of CALLS
#             transactions, one client; bq's script is the dequeue alone, sq's
#             enqueues 100 events (enqueue_batch, not timed) and then dequeues
#             100; the figure is the dequeue statement's mean latency
#             (pgbench -r); median of the rounds and of the rounds' own ratios
#   drain     the rest of bq by dequeue(bq, 100), one client (pgbench -t),
#             while a producer (a second pgbench, -R 20, enqueue_batch of 10
#             events into bq) runs beside it: its failed transactions are
#             producers refused.  The drain's latency over time: pgbench's
#             aggregate log (5 s windows), first, middle and last windows.
#             Then the producer's leftovers are drained too.
#   size      bq's size on disk (lib.sh queue_bytes: spindles + table +
#             consumer relation, and the table alone, whose slot map has 6
#             bytes per undropped event) right after the drain, then every 2 s
#             while the worker drops spindles (until its spindle count stays
#             put for 10 s, at most 120 s), against the steady bound of issue 9
#             (docs/benchmarks.md, section 3) with no backlog: the size of the
#             empty queue + 2 spindles (a full spindle's size_bytes)
#
# Settings: PostgreSQL's and spindle's defaults (the worker on); the pgbench
# sessions run with synchronous_commit = off (the flush of a commit is not
# the call's cost; the same on both sides).
#
#   PG_CONFIG      the PostgreSQL installation (spindle installed in it)
#   BENCH_EVENTS   the backlog (default 5000000; the full size is 100000000,
#                  about 25 GB of spindles)
#   ROUNDS         rounds at the start (default 5); CALLS: calls per round (500)
#   BENCH_PORT     the cluster's port (default 5521); BENCH_KEEP=1 keeps it
# Usage: [BENCH_EVENTS=5000000] bench/backlog.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=backlog.sh
PORT=${BENCH_PORT:-5521}
N=${BENCH_EVENTS:-5000000}
ROUNDS=${ROUNDS:-5}
CALLS=${CALLS:-500}
source "$ROOT/bench/lib.sh"
((N % 10000 == 0)) || fail "BENCH_EVENTS must be a multiple of 10000"

cluster_start
header "BENCH_EVENTS = $N, $ROUNDS rounds of $CALLS calls at the start"
q "SELECT spindle.create_queue('bq'), spindle.create_queue('sq')" >/dev/null
base=$(queue_bytes bq)

# ---- the backlog
t0=$(now)
out=$(q "DO \$\$ DECLARE p jsonb := '$PAYLOAD'; refused bigint := 0; first text; BEGIN
           FOR i IN 1..$((N / 10000)) LOOP
             BEGIN PERFORM count(*) FROM spindle.enqueue_batch('bq', array_fill(p, ARRAY[10000]));
             EXCEPTION WHEN others THEN
               refused := refused + 10000; first := coalesce(first, SQLERRM || ' (' || SQLSTATE || ')');
             END;
             COMMIT;
           END LOOP;
           RAISE WARNING 'refused % %', refused, coalesce(first, ''); END \$\$" 2>&1 || true)
fill_refused=$(sed -n 's/.*refused \([0-9]*\).*/\1/p' <<<"$out")
fill_first=$(sed -n 's/.*refused [0-9]* \(.*\)/\1/p' <<<"$out")
fill_s=$(since "$t0")
echo "  fill: $N events in $fill_s s, $fill_refused refused ${fill_first:+(first: $fill_first)}"
read -r depth nspindles full_size bqsize <<<"$(q "SELECT (SELECT depth FROM spindle.queues WHERE queue_name = 'bq'),
        (SELECT count(*) FROM spindle.spindles WHERE relation = 'spindle_q.bq'::regclass),
        (SELECT max(size_bytes) FROM spindle.spindles WHERE relation = 'spindle_q.bq'::regclass AND state = 'full'),
        pg_total_relation_size('spindle_q.bq')" | tr '|' ' ')"
with_backlog=$(queue_bytes bq)
echo "  backlog: depth $depth, $nspindles spindles, $with_backlog bytes ($bqsize in the table), a full spindle $full_size bytes"
q "SELECT count(*) FROM spindle.enqueue_batch('sq', array_fill('$PAYLOAD'::jsonb, ARRAY[1000]))" >/dev/null
q "CHECKPOINT"

# ---- the start of the drain against a 1 000-event backlog
f=$(wfile bq.sql); echo "SELECT msg_id, enqueued_at, payload FROM spindle.dequeue('bq', 100);" > "$f"
f=$(wfile sq.sql); {
    echo "SELECT count(*) FROM spindle.enqueue_batch('sq', array_fill('$PAYLOAD'::jsonb, ARRAY[100]));"
    echo "SELECT msg_id, enqueued_at, payload FROM spindle.dequeue('sq', 100);"; } > "$f"
pgb() { (cd "$tmp" && "${AS_PG[@]}" env PGHOST="$PGHOST" PGPORT="$PGPORT" PGOPTIONS='-c synchronous_commit=off' \
            "$BIN/pgbench" -n -c 1 "$@" bench 2>&1); }
run() {
    local x=$1 out
    out=$(pgb -t "$CALLS" -r -f "$tmp/$x.sql") || { echo "$out" >&2; fail "pgbench on $x failed"; }
    awk '/statement latencies/ {on = 1; next} on && /spindle\.dequeue\(/ {print $1}' <<<"$out" >> "$tmp/lat.$x"
}
for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then order="bq sq"; else order="sq bq"; fi
    for x in $order; do run $x; done
    echo "  round $r/$ROUNDS, dequeue(q, 100) ms: bq $(tail -1 "$tmp/lat.bq") sq $(tail -1 "$tmp/lat.sq")"
done
steady=$(queue_bytes sq)

# ---- the drain, with a producer beside it
left=$(q "SELECT depth FROM spindle.queues WHERE queue_name = 'bq'")
q "CREATE TABLE stop_producer (x int)"
# the producer: 10 events every 50 ms until the drain is over; refusals
# are counted, not retried
q "DO \$\$ DECLARE p jsonb := '$PAYLOAD'; ok bigint := 0; refused bigint := 0; first text; BEGIN
     LOOP
       BEGIN PERFORM count(*) FROM spindle.enqueue_batch('bq', array_fill(p, ARRAY[10])); ok := ok + 1;
       EXCEPTION WHEN others THEN
         refused := refused + 1; first := coalesce(first, SQLERRM || ' (' || SQLSTATE || ')');
       END;
       COMMIT;
       EXIT WHEN EXISTS (SELECT FROM stop_producer);
       PERFORM pg_sleep(0.05);
     END LOOP;
     RAISE WARNING 'producer % % %', ok, refused, coalesce(first, ''); END \$\$" > "$tmp/prod.out" 2>&1 &
prod=$!
t0=$(now)
out=$(pgb -t $(((left + 99) / 100)) -r -l --aggregate-interval=5 --log-prefix="$tmp/drain" -f "$tmp/bq.sql") ||
    { echo "$out" >&2; fail "the drain failed"; }
drain_s=$(since "$t0")
q "INSERT INTO stop_producer VALUES (1)"
wait "$prod" || true
read -r prod_ok prod_failed prod_first <<<"$(sed -n 's/.*producer \([0-9]*\) \([0-9]*\) \(.*\)/\1 \2 \3/p' "$tmp/prod.out")"
drain_mean=$(awk '/statement latencies/ {on = 1; next} on && /spindle\.dequeue\(/ {print $1}' <<<"$out")
# aggregate log lines: interval start, transactions, sum latency (us), ...
cat "$tmp"/drain.* 2>/dev/null | awk '$2 > 0 {printf "%.4f\n", $3 / $2 / 1000}' > "$tmp/windows"
nw=$(wc -l < "$tmp/windows")
q "DO \$\$ DECLARE n int; BEGIN LOOP SELECT count(*) INTO n FROM spindle.dequeue('bq', 100); COMMIT;
     EXIT WHEN n = 0; END LOOP; END \$\$"
echo "  drain: $left events in $drain_s s (mean dequeue $drain_mean ms); producer: $prod_ok transactions," \
     "$prod_failed refused"

# ---- size after the drain, while the worker drops spindles
t0=$(now); last=""; stable=0
: > "$tmp/after"
while :; do
    read -r ns tb <<<"$(q "SELECT (SELECT count(*) FROM spindle.spindles WHERE relation = 'spindle_q.bq'::regclass),
                               pg_total_relation_size('spindle_q.bq')" | tr '|' ' ')"
    echo "$(since "$t0") $ns $(queue_bytes bq) $tb" >> "$tmp/after"
    if [[ $ns == "$last" ]]; then stable=$((stable + 2)); else stable=0; last=$ns; fi
    ((stable < 10)) || break
    (($(calc "$(now) - $t0 < 120" %d))) || break
    sleep 2
done
read -r _ ns_end size_end table_end <<<"$(tail -1 "$tmp/after")"
bound=$((base + 2 * full_size))

echo
echo "== dequeue(q, 100), ms (pgbench -r, one client, $ROUNDS rounds of $CALLS calls, synchronous_commit off)"
a=$(median < "$tmp/lat.bq"); b=$(median < "$tmp/lat.sq")
printf '  %-48s %10s\n' "$N-event backlog, start of the drain" "$a" "1 000-event backlog (steady)" "$b"
echo "  ratio $(calc "$a / $b"); median of the rounds' own ratios" \
     "$(paste "$tmp/lat.bq" "$tmp/lat.sq" | awk '{print $1 / $2}' | median)"
echo "  rounds: bq $(tr '\n' ' ' < "$tmp/lat.bq")| sq $(tr '\n' ' ' < "$tmp/lat.sq")"
echo "  the drain: mean $drain_mean ms over $left events"
((nw == 0)) || echo "  5 s windows of the drain ($nw), mean dequeue ms: first $(head -1 "$tmp/windows")," \
     "middle $(sed -n "$(((nw + 1) / 2))p" "$tmp/windows"), last full $(tail -2 "$tmp/windows" | head -1), median $(median < "$tmp/windows")"
echo "== producers: fill $fill_refused refused; during the drain $prod_ok enqueue_batch(10) calls committed," \
     "$prod_failed refused ${prod_first:+(first: $prod_first)}"
echo "== size (bytes): empty queue $base; with the backlog $with_backlog; steady queue sq $steady"
echo "   after the drain (s, spindles, queue bytes, table bytes):"
sed 's/^/     /' "$tmp/after"
echo "   bound (empty + 2 full spindles of $full_size): $bound; at the end $size_end, $(calc "$size_end / $bound") x the bound;" \
     "the table (facade + slot map + index) $table_end"
