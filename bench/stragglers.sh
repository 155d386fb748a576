#!/usr/bin/env bash
# bench/stragglers.sh: do delayed events and leases cost a consumer anything
# when there are many of them (issue 18)?  Delayed events and leases are
# parked on disk, in the queue's consumer relation (docs/design.md, "Parked
# delayed and leased events"), so a call should cost the same with 0 and
# with N of them, and spindle's shared memory should not move.  Measures,
# side by side and alternating between the queues, ROUNDS times, and prints
# the medians and their ratio (N / 0; the issue's bar is 1.2):
#
#   dequeue(q, 10)              pgbench -T, one client; its script enqueues
#                               10 events (enqueue_batch) and dequeues them,
#                               so every dequeue consumes 10 fresh events
#                               (not an empty poll); the figure is the
#                               dequeue statement's mean latency (pgbench
#                               -r), the enqueue is not counted, and the
#                               backend's CPU time around it
#                               (/proc/self/schedstat).  Queue d0
#                               has no delayed event, dn has N of them,
#                               due in 1 h + g ms (g = 1..N) plus 1 h for
#                               odd g: every due is distinct and no two
#                               neighbours are within a second, so each
#                               event is a parked run of its own (N runs,
#                               N due references), passed (parked) by a
#                               first dequeue before the rounds
#   read(q, 10, '1 h') + ack    the same with read of 10 and one ack call
#                               of the 10 ids read (two statements, each
#                               its own transaction): the sum of their mean
#                               latencies.  Queue l0 has no lease, ln has N
#                               leases of 1 h in flight, one event each: 2N
#                               events enqueued, every other one deleted,
#                               the N left read (read returns at most
#                               spindle.max_leases separate runs per call)
#   blocks per call             shared buffer hits and reads of the queues'
#                               relations (pg_statio) over 200 calls of
#                               each in one session: no load disturbs it
#   first call after a restart  one dequeue / read per queue, timed, after
#                               a fast restart (the state rebuilt from disk)
#   shared memory               spindle's allocations in pg_shmem_allocations
#                               (named "spindle ..."), and the server's whole
#                               allocated shared memory with spindle
#                               preloaded minus without it (hash tables'
#                               elements are allocated unnamed); then again,
#                               with the free shared memory, once the N
#                               delayed events and N leases are in place and
#                               after the rounds: it should not change
#   consumer relation           pg_relation_size of pg_spindle.c<queue oid>
#                               of each queue, after setup and after the
#                               rounds
#
# The timed sessions run with synchronous_commit = off, so that the figures
# are the calls' own cost rather than the WAL flush of their commits (the
# same on both sides, and most of a call's time with it on); everything
# else is at spindle's and PostgreSQL's defaults (the worker runs).
#
# Standalone: a throwaway cluster (initdb in a temp dir, unix socket only,
# its own port; as user postgres when run as root), removed at the end.
# Only the PostgreSQL installation's programs are used.
#
#   PG_CONFIG     the PostgreSQL installation (spindle installed in it);
#                 default /usr/lib/postgresql/15/bin/pg_config
#   BENCH_N       delayed events and leases (default 1000000)
#   ROUNDS        rounds (default 5); SECS: seconds per pgbench run (5)
#   BENCH_PORT    the cluster's port (default 5517)
#   BENCH_KEEP=1  keep the work directory (cluster, server log)
# Usage: [BENCH_N=1000000] [ROUNDS=5] [SECS=5] bench/stragglers.sh
#        (make bench-stragglers)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
N=${BENCH_N:-1000000}
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-5}
PORT=${BENCH_PORT:-5517}
NAME=stragglers.sh
# the cluster, psql/q, median, now, since, calc, pgctl, SHM_*: bench/lib.sh
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
SHM_FREE="SELECT sum(allocated_size) FROM pg_shmem_allocations WHERE name IS NULL"

# ---- the cluster: once without spindle, for the shared memory it adds
cluster_start
shm_with=$(psql -At -d postgres -c "$SHM_TOTAL")
shm() {        # shm LABEL: spindle's named allocations, with - without, free
    printf '%s %s %s %s\n' "$(q "$SHM_SPINDLE")" \
        "$(($(q "$SHM_TOTAL") - shm_without))" "$(q "$SHM_FREE")" "$1" >> "$tmp/shm"
}
q "SELECT name, allocated_size FROM pg_shmem_allocations WHERE name LIKE 'spindle%' ORDER BY name" \
    > "$tmp/shm_names"
shm "at start, defaults"
echo "== spindle $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'), PostgreSQL $("$BIN/postgres" -V | awk '{print $3}'), N = $N, $ROUNDS rounds of ${SECS} s, $(date -u '+%F %H:%M') UTC"

for x in d0 dn l0 ln; do q "SELECT spindle.create_queue('$x')" >/dev/null; done

# ---- N delayed events with distinct dues (a delay per event: enqueue in a
# set-returning SELECT, 20 000 per statement), then 10 ready ones; dequeue
# until it returns those: it has passed, and parked, the delayed ones
t0=$(now)
chunk=20000
for ((lo = 1; lo <= N; lo += chunk)); do
    hi=$((lo + chunk - 1 < N ? lo + chunk - 1 : N))
    q "SELECT count(spindle.enqueue('dn', '$PAYLOAD',
              make_interval(hours => 1 + g % 2, secs => g / 1000.0)))
         FROM generate_series($lo, $hi) g" >/dev/null
done
echo "  dn: $N delayed events enqueued in $(since "$t0") s"
t0=$(now)
q "SELECT count(*) FROM spindle.enqueue_batch('dn', array_fill('$PAYLOAD'::jsonb, ARRAY[10]))" >/dev/null
calls=0
while :; do
    calls=$((calls + 1))
    got=$(q "SELECT count(*) FROM spindle.dequeue('dn', 10)")
    ((got == 0)) || break
    ((calls < 100000)) || fail "dn: no dequeue returned the ready events"
done
echo "  dn: the first dequeues ($calls calls) passed them in $(since "$t0") s"

# ---- N leases of one event each: 2N events, every other one deleted, the
# rest read with a 1 h lease (each read call leases at most
# spindle.max_leases separate runs)
t0=$(now)
for ((lo = 1; lo <= 2 * N; lo += chunk)); do
    n=$((2 * N - lo + 1 < chunk ? 2 * N - lo + 1 : chunk))
    q "SELECT count(*) FROM spindle.enqueue_batch('ln', array_fill('$PAYLOAD'::jsonb, ARRAY[$n]))" >/dev/null
done
q "DELETE FROM spindle_q.ln WHERE msg_id % 2 = 0" >/dev/null
echo "  ln: $((2 * N)) events enqueued, $N deleted in $(since "$t0") s"
t0=$(now)
calls=0
while :; do
    got=$(q "SELECT count(*) FROM spindle.read('ln', 50000, '1 h')")
    ((got > 0)) || break
    calls=$((calls + 1))
done
echo "  ln: $N events leased in $calls read calls, $(since "$t0") s"
q "CHECKPOINT"
q "VACUUM ANALYZE"
# what the queues hold: leased and delayed are what spindle.queues counts
# (depth is NULL while a spindle cannot be counted: docs/monitoring.md)
q "SELECT queue_name, coalesce(depth::text, 'NULL'), leased, delayed FROM spindle.queues ORDER BY 1" | tr '|' ' ' |
    while read -r name depth leased delayed; do
        printf '  %s: depth %s, leased %s, delayed %s\n' "$name" "$depth" "$leased" "$delayed"
    done
read -r dl ll <<<"$(q "SELECT (SELECT delayed FROM spindle.queues WHERE queue_name = 'dn'),
                              (SELECT leased FROM spindle.queues WHERE queue_name = 'ln')" | tr '|' ' ')"
[[ $dl == "$N" ]] || echo "  warning: dn holds $dl delayed events, not $N"
[[ $ll == "$N" ]] || echo "  warning: ln holds $ll leases, not $N"
shm "with N delayed + N leases"
crel() { q "SELECT pg_relation_size(('pg_spindle.c' || 'spindle_q.$1'::regclass::oid)::regclass)"; }
for x in d0 dn l0 ln; do echo "$x $(crel $x)"; done > "$tmp/crel"

# ---- the pgbench scripts.  Besides the latency of the timed statements
# (pgbench -r), each transaction records the CPU time its backend spent
# from just before them to just after them (/proc/self/schedstat: the
# scheduler's nanoseconds on a CPU), which the load of other processes on
# the machine disturbs much less than a latency
CPU="split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint"
q "CREATE UNLOGGED TABLE bench_cpu (q text, ns bigint)"
for x in d0 dn l0 ln; do
    {
        echo "SELECT count(*) FROM spindle.enqueue_batch('$x', array_fill('$PAYLOAD'::jsonb, ARRAY[10]));"
        echo "SELECT $CPU AS c0 \\gset"
        if [[ $x == d* ]]; then
            echo "SELECT msg_id, enqueued_at, payload FROM spindle.dequeue('$x', 10);"
        else
            echo "SELECT string_agg(msg_id::text, ',') AS ids, json_agg(payload) AS payloads FROM spindle.read('$x', 10, '1 h') \\gset"
            echo "SELECT count(*) FROM spindle.ack('$x', ARRAY[:ids]::bigint[]);"
        fi
        echo "INSERT INTO bench_cpu SELECT '$x', $CPU - :c0;"
    } > "$tmp/$x.sql"
done
chmod 644 "$tmp"/*.sql
# bench Q: pgbench -T SECS -r on queue Q; records the timed statements'
# mean latency (ms); checks that every call took its 10 fresh events
bench() {
    local x=$1 out before after
    before=$(q "SELECT depth FROM spindle.queues WHERE queue_name = '$x'")
    out=$("${AS_PG[@]}" env PGHOST="$PGHOST" PGPORT="$PGPORT" PGOPTIONS='-c synchronous_commit=off' \
        "$BIN/pgbench" -n -c 1 -T "$SECS" -r -f "$tmp/$x.sql" bench 2>&1) ||
        { echo "$out" >&2; fail "pgbench on $x failed"; }
    after=$(q "SELECT depth FROM spindle.queues WHERE queue_name = '$x'")
    [[ $before == "$after" ]] || echo "  warning: $x: depth $before before the run, $after after"
    grep -q 'number of failed transactions: 0 ' <<<"$out" ||
        { echo "$out" >&2; fail "pgbench on $x had failed transactions"; }
    # per-command lines: latency, failures, the command
    awk '/statement latencies/ {on = 1; next}
         on && /spindle\.(dequeue|read|ack)\(/ {s += $1}
         END {printf "%.4f\n", s}' <<<"$out" >> "$tmp/lat.$x"
    q "SELECT round(avg(ns) / 1000000.0, 4) FROM bench_cpu WHERE q = '$x'" >> "$tmp/cpu.$x"
    q "TRUNCATE bench_cpu"
}
echo "== $ROUNDS rounds, alternating"
for ((r = 1; r <= ROUNDS; r++)); do
    # ABBA: the first of a pair changes each round, so that a drift of the
    # machine's load does not favour one side
    if ((r % 2)); then order="d0 dn l0 ln"; else order="dn d0 ln l0"; fi
    for x in $order; do bench $x; done
    printf '  round %d/%d, latency (CPU) in ms:' "$r" "$ROUNDS"
    for x in d0 dn l0 ln; do printf ' %s %s (%s)' $x "$(tail -1 "$tmp/lat.$x")" "$(tail -1 "$tmp/cpu.$x")"; done
    echo
done
shm "after the rounds"
for x in d0 dn l0 ln; do crel $x; done > "$tmp/crel_after"

# ---- blocks per call (shared buffer hits and reads of the queue's table,
# its spindles and its consumer relation, pg_statio), which no load on the
# machine disturbs: CALLS calls in one session, the ack's commit included
CALLS=200
blocks() {
    q "SELECT pg_stat_force_next_flush()" >/dev/null
    q "SELECT sum(coalesce(heap_blks_hit, 0) + coalesce(heap_blks_read, 0)
                  + coalesce(idx_blks_hit, 0) + coalesce(idx_blks_read, 0))
         FROM pg_statio_all_tables WHERE schemaname IN ('spindle_q', 'pg_spindle')"
}
for x in d0 dn l0 ln; do
    q "SELECT count(*) FROM spindle.enqueue_batch('$x', array_fill('$PAYLOAD'::jsonb, ARRAY[$((CALLS * 10))]))" >/dev/null
    {
        echo "SET synchronous_commit = off;"
        for ((i = 0; i < CALLS; i++)); do
            if [[ $x == d* ]]; then
                echo "SELECT msg_id, enqueued_at, payload FROM spindle.dequeue('$x', 10) \\g /dev/null"
            else
                echo "SELECT string_agg(msg_id::text, ',') AS ids FROM spindle.read('$x', 10, '1 h') \\gset"
                echo "SELECT count(*) FROM spindle.ack('$x', ARRAY[:ids]::bigint[]) \\g /dev/null"
            fi
        done
        echo "SELECT pg_stat_force_next_flush();"
    } > "$tmp/blocks_$x.sql"
    chmod 644 "$tmp/blocks_$x.sql"
    b0=$(blocks)
    psql -d "$PGDATABASE" -f "$tmp/blocks_$x.sql" >/dev/null
    sleep 0.2
    calc "($(blocks) - $b0) / $CALLS" %.4f > "$tmp/blk.$x"
done

# ---- the first call after a restart: the consumer state is rebuilt from
# disk, and a rebuilt state passes the parked runs at its head one probe of
# tree 0 each (docs/design.md, "Parked delayed and leased events")
for x in d0 dn l0 ln; do
    q "SELECT count(*) FROM spindle.enqueue_batch('$x', array_fill('$PAYLOAD'::jsonb, ARRAY[10]))" >/dev/null
done
pgctl -m fast restart
shm "after a restart"
for x in d0 dn l0 ln; do
    if [[ $x == d* ]]; then call="SELECT count(*) FROM spindle.dequeue('$x', 10)"
    else call="SELECT count(*) FROM spindle.read('$x', 10, '1 h')"; fi
    psql -At -d "$PGDATABASE" <<SQL | awk '/^Time:/ {print $2; exit}' > "$tmp/first.$x"
SELECT 1;
\\timing on
$call;
SQL
done

echo
echo "== medians of $ROUNDS rounds (pgbench -T $SECS, one client, synchronous_commit off), ms;"
echo "   ratio = N / 0, N = $N"
row() {
    local a b
    a=$(median < "$tmp/$2.$3"); b=$(median < "$tmp/$2.$4")
    printf '%-44s %10.4f %10.4f %7.2f\n' "$1" "$a" "$b" "$(calc "$a > 0 ? $b / $a : 0")"
}
printf '%-44s %10s %10s %7s\n' metric "0" "N" ratio
row "dequeue(q, 10), N delayed: latency" lat d0 dn
row "dequeue(q, 10), N delayed: backend CPU" cpu d0 dn
row "read(q, 10, '1 h') + ack, N leases: latency" lat l0 ln
row "read(q, 10, '1 h') + ack, N leases: CPU" cpu l0 ln
# the median of each round's N / 0 (the two runs of a round are adjacent)
pair() {
    paste "$tmp/$2.$3" "$tmp/$2.$4" | awk '{print ($1 > 0 ? $2 / $1 : 0)}' | median |
        xargs printf '   %-41s %29.2f\n' "$1"
}
echo "   median of the rounds' own ratios:"
pair "dequeue, latency" lat d0 dn
pair "dequeue, CPU" cpu d0 dn
pair "read + ack, latency" lat l0 ln
pair "read + ack, CPU" cpu l0 ln
echo "   blocks per call ($CALLS calls, one session; no median):"
row "dequeue(q, 10), N delayed: blocks" blk d0 dn
row "read(q, 10, '1 h') + ack, N leases: blocks" blk l0 ln
echo "   the first call after a restart (ms; one call):"
row "dequeue(q, 10), N delayed" first d0 dn
row "read(q, 10, '1 h'), N leases" first l0 ln
for m in lat cpu; do
    echo "   rounds, $m (ms): d0 $(tr '\n' ' ' < "$tmp/$m.d0")| dn $(tr '\n' ' ' < "$tmp/$m.dn")"
    echo "                     l0 $(tr '\n' ' ' < "$tmp/$m.l0")| ln $(tr '\n' ' ' < "$tmp/$m.ln")"
done
echo
echo "== shared memory (bytes): spindle's named allocations; all allocations with"
echo "   spindle preloaded minus without ($shm_with - $shm_without); free shared memory"
printf '%-28s %14s %14s %14s\n' when "spindle%" "with - without" free
while read -r named diff free label; do
    printf '%-28s %14s %14s %14s\n' "$label" "$named" "$diff" "$free"
done < "$tmp/shm"
echo "   named: $(tr '|' '=' < "$tmp/shm_names" | tr '\n' ' ')"
echo
echo "== consumer relation pg_spindle.c<oid> (bytes): after setup; after the rounds"
paste -d' ' "$tmp/crel" "$tmp/crel_after" | while read -r x s a; do
    printf '  %s %12s (%s) %12s (%s)\n' "$x" "$s" "$(q "SELECT pg_size_pretty($s::bigint)")" \
        "$a" "$(q "SELECT pg_size_pretty($a::bigint)")"
done
