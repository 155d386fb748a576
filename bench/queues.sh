#!/usr/bin/env bash
# bench/queues.sh (make bench-queues): does a consumer call cost more when
# there are many queues (issue 19)?  BENCH_QUEUES queues with one event each,
# consumed round-robin by dequeue(q, 1) from one connection, one call per
# transaction, against 10 queues and against a heap table per queue.
#
#   sN    BENCH_QUEUES spindle queues, one event each; a pass is one
#         dequeue(q, 1) per queue in turn (each takes the queue's only event)
#   hN    BENCH_QUEUES heap tables (id bigserial primary key, enqueued_at,
#         payload), one row each; a pass is one
#         WITH d AS (DELETE ... WHERE id = (SELECT id ... ORDER BY id LIMIT 1
#         FOR UPDATE SKIP LOCKED) RETURNING *) SELECT count(*) FROM d
#         per table in turn
#   s10   10 spindle queues; a pass is BENCH_QUEUES / 10 times: one statement
#         enqueuing one event into each of the 10 (not timed), then one
#         dequeue(q, 1) per queue in turn: as many calls as sN's pass, each
#         taking a queue's only event, over 10 queues
#   h10   the same with 10 heap tables
#
# A pass is a psql script of one statement per call (autocommit) with
# \timing on; the figure is the median of its calls' times as psql sees them
# (round trip included, the same on every side) that took an event.  The
# first pass of each (cold: the queues' state is built) is reported apart;
# then ROUNDS warm
# passes, the four alternating (ABBA), each after a refill of one event per
# queue (not timed).  Every call must take its event: the script counts the
# calls that took one and the errors.
#
# Shared memory: spindle's named allocations (pg_shmem_allocations, name
# LIKE 'spindle%') and all allocations with spindle preloaded minus without,
# at the defaults before any queue exists and after the passes.
#
# Errors are recorded, not hidden: if creating a queue, enqueuing into one
# or a dequeue fails (at the defaults a queue's open spindle needs one of
# spindle.max_open_spindles slot counters, 4 096), the script prints the
# first error and how many failed, and goes on with the queues it has: sN's
# passes cover the queues up to the first refused enqueue (NOK), and 20
# dequeue calls on refused queues are timed apart.
#
# Settings: PostgreSQL's and spindle's defaults (the worker on;
# spindle.max_queues = 256 consumer states, so sN's states are evicted and
# rebuilt as the pass goes round); synchronous_commit = off for the passes
# (the commit's flush is not the call's cost).
#
#   PG_CONFIG      the PostgreSQL installation (spindle installed in it)
#   BENCH_QUEUES   queues (default 10000; the full size is 100000)
#   ROUNDS         warm passes of each (default 3)
#   BENCH_PORT     the cluster's port (default 5519); BENCH_KEEP=1 keeps it
# Usage: [BENCH_QUEUES=10000] [ROUNDS=3] bench/queues.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=queues.sh
PORT=${BENCH_PORT:-5519}
N=${BENCH_QUEUES:-10000}
ROUNDS=${ROUNDS:-3}
source "$ROOT/bench/lib.sh"
((N >= 10 && N % 10 == 0)) || fail "BENCH_QUEUES must be a multiple of 10"

cluster_start
header "BENCH_QUEUES = $N, $ROUNDS warm passes"
shm() { printf '%s %s %s\n' "$(q "$SHM_SPINDLE")" "$(($(q "$SHM_TOTAL") - shm_without))" "$1" >> "$tmp/shm"; }
shm "defaults, no queue"

# ---- s10's queues first, so that they hold slot counters whatever sN
# leaves; then N spindle queues: one subtransaction each, so that the first failure
# stops the loop with what was created so far committed
for i in $(seq 1 10); do q "SELECT spindle.create_queue('t$i')" >/dev/null; done
t0=$(now)
out=$(q "DO \$\$ BEGIN FOR i IN 1..$N LOOP
           BEGIN PERFORM spindle.create_queue('q' || i);
           EXCEPTION WHEN others THEN
             RAISE WARNING 'create_queue failed at queue %: % (SQLSTATE %)', i, SQLERRM, SQLSTATE;
             RETURN; END;
           IF i % 200 = 0 THEN COMMIT; END IF;
         END LOOP; END \$\$" 2>&1 || true)
NS=$(q "SELECT count(*) FROM spindle.queues WHERE queue_name ~ '^q[0-9]+$'")
echo "  $NS of $N spindle queues created in $(since "$t0") s"
[[ -z $out ]] || { echo "  $out" | head -3; echo "create: $out" >> "$tmp/errors"; }

# ---- N heap tables
t0=$(now)
q "DO \$\$ BEGIN FOR i IN 1..$N LOOP
     EXECUTE format('CREATE TABLE h%s (id bigserial PRIMARY KEY,
                     enqueued_at timestamptz NOT NULL DEFAULT now(), payload jsonb)', i);
     IF i % 200 = 0 THEN COMMIT; END IF;
   END LOOP;
   FOR i IN 1..10 LOOP
     EXECUTE format('CREATE TABLE g%s (id bigserial PRIMARY KEY,
                     enqueued_at timestamptz NOT NULL DEFAULT now(), payload jsonb)', i);
   END LOOP; END \$\$"
echo "  $N heap tables created in $(since "$t0") s"

# refill SYSTEM: one event in each of sN's queues / hN's tables (s10 and h10
# enqueue within their pass).  sN's first refill tries all NS queues; the
# queues up to the first refused one are sN's from then on (NOK).
NOK=$NS
refill() {
    local out
    case $1 in
    sN) out=$(q "DO \$\$ DECLARE bad int := 0; BEGIN FOR i IN 1..$NOK LOOP
                   BEGIN PERFORM spindle.enqueue('q' || i, '$PAYLOAD');
                   EXCEPTION WHEN others THEN
                     bad := bad + 1;
                     IF bad = 1 THEN RAISE WARNING 'enqueue failed at queue %: % (SQLSTATE %)',
                                                   i, SQLERRM, SQLSTATE; END IF;
                   END;
                   IF i % 200 = 0 THEN COMMIT; END IF;
                 END LOOP;
                 IF bad > 0 THEN RAISE WARNING '% enqueues failed', bad; END IF; END \$\$" 2>&1 || true)
        if [[ -n $out ]]; then
            echo "  sN refill: $(echo $out)"; echo "refill: $(echo $out)" >> "$tmp/errors"
            local at
            at=$(sed -n 's/.*enqueue failed at queue \([0-9]*\):.*/\1/p' <<<"$out")
            [[ -z $at ]] || NOK=$((at - 1))
        fi ;;
    hN) q "DO \$\$ BEGIN FOR i IN 1..$N LOOP
             EXECUTE format('INSERT INTO h%s (payload) VALUES (%L)', i, '$PAYLOAD');
             IF i % 200 = 0 THEN COMMIT; END IF;
           END LOOP; END \$\$" ;;
    esac
}
# the pass scripts
sn_script() {   # sN's pass: queues 1 .. NOK
    local f
    f=$(wfile sN.sql); { echo '\timing on'; for ((i = 1; i <= NOK; i++)); do
        echo "SELECT count(*) FROM spindle.dequeue('q$i', 1);"; done; } > "$f"
}
f=$(wfile hN.sql); { echo '\timing on'; for ((i = 1; i <= N; i++)); do
    echo "WITH d AS (DELETE FROM h$i WHERE id = (SELECT id FROM h$i ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, enqueued_at, payload) SELECT count(*) FROM d;"
    done; } > "$f"
enq10=$(for i in $(seq 1 10); do printf "spindle.enqueue('t$i', '$PAYLOAD')%s" "$( ((i < 10)) && echo ,)"; done)
f=$(wfile s10.sql); { echo '\timing on'; for ((k = 0; k < N / 10; k++)); do
    echo "SELECT $enq10;"
    for i in $(seq 1 10); do echo "SELECT count(*) FROM spindle.dequeue('t$i', 1);"; done
    done; } > "$f"
f=$(wfile h10.sql); { echo '\timing on'; for ((k = 0; k < N / 10; k++)); do
    echo "WITH $(for i in $(seq 1 10); do printf "i$i AS (INSERT INTO g$i (payload) VALUES ('$PAYLOAD') RETURNING 1)%s" "$( ((i < 10)) && echo ,)"; done) SELECT 1, 2;"
    for i in $(seq 1 10); do
        echo "WITH d AS (DELETE FROM g$i WHERE id = (SELECT id FROM g$i ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, enqueued_at, payload) SELECT count(*) FROM d;"
    done; done; } > "$f"

# pass X LABEL: run X's script; appends the calls' times (ms) to
# $tmp/X.LABEL, counts the calls that took their event and the errors.
# The output alternates a result line and a "Time:" line; the refills of
# s10 and h10 print "n|n|..." and are skipped.
pass() {
    local x=$1 label=$2 out
    out=$(wfile "out.$x.$label")
    "${AS_PG[@]}" env PGHOST="$PGHOST" PGPORT="$PGPORT" PGOPTIONS='-c synchronous_commit=off' \
        "$BIN/psql" -X -At -d "$PGDATABASE" -f "$tmp/$x.sql" > "$out" 2> "$out.err" || true
    # only the calls that took an event (an empty poll of a queue whose
    # enqueue was refused is not the figure); empty polls are counted
    awk '/^Time:/ {if (prev == "1") print $2; next} {prev = $0}' "$out" >> "$tmp/$x.$label"
    printf '%s %s %s\n' "$(grep -c '^1$' "$out" || true)" "$(grep -c 'ERROR' "$out.err" || true)" \
        "$(grep -m1 'ERROR' "$out.err" || true)" > "$tmp/ok.$x.$label"
}
calls() { if [[ $1 == sN ]]; then echo "$NOK"; else echo "$N"; fi; }
check() {
    local x=$1 label=$2 ok bad first
    read -r ok bad first < "$tmp/ok.$x.$label" || true
    if [[ $ok != "$(calls "$x")" || $bad != 0 ]]; then
        echo "  $x $label: $ok of $(calls "$x") calls took their event, $bad errors ${first:+(first: $first)}"
        echo "$x $label: $ok of $(calls "$x") took an event, $bad errors ${first:+(first: $first)}" >> "$tmp/errors"
    fi
}

echo "== the cold pass (the first of each)"
for x in sN hN s10 h10; do
    refill $x
    if [[ $x == sN ]]; then
        sn_script
        if ((NOK < NS)); then
            # the queues whose enqueue was refused: 20 dequeue calls on them
            f=$(wfile sF.sql); { echo '\timing on'; for ((i = NOK + 1; i <= NOK + 20 && i <= NS; i++)); do
                echo "SELECT count(*) FROM spindle.dequeue('q$i', 1);"; done; } > "$f"
            "${AS_PG[@]}" env PGHOST="$PGHOST" PGPORT="$PGPORT" "$BIN/psql" -X -At -d "$PGDATABASE" \
                -f "$tmp/sF.sql" > "$tmp/out.sF" 2> "$tmp/out.sF.err" || true
            echo "  dequeue(q, 1) on the queues past $NOK: $(grep -c '^[01]$' "$tmp/out.sF" || true) returned," \
                 "$(grep -c ERROR "$tmp/out.sF.err" || true) errors (first: $(grep -m1 ERROR "$tmp/out.sF.err" | sed 's/^psql:[^ ]* //'))," \
                 "median $(awk '/^Time:/ {print $2}' "$tmp/out.sF" | median) ms per call"
            echo "dequeue past $NOK: $(grep -m1 ERROR "$tmp/out.sF.err" | sed 's/^psql:[^ ]* //')" >> "$tmp/errors"
        fi
    fi
    pass $x cold; check $x cold
    printf '  %s: median %s ms\n' $x "$(median < "$tmp/$x.cold")"
done
shm "after the cold passes"
echo "== $ROUNDS warm passes, alternating"
for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then order="sN hN s10 h10"; else order="hN sN h10 s10"; fi
    printf '  round %d/%d, median ms:' "$r" "$ROUNDS"
    for x in $order; do
        refill $x
        : > "$tmp/$x.r$r"
        pass $x "r$r"; check $x "r$r"
        cat "$tmp/$x.r$r" >> "$tmp/$x.warm"
        printf ' %s %s' $x "$(median < "$tmp/$x.r$r")"
    done
    echo
done
shm "after the warm passes"

echo
echo "== per-call latency, ms (psql \\timing, one connection, synchronous_commit off)"
printf '%-40s %10s %10s\n' "" cold warm
for x in sN hN s10 h10; do
    case $x in
    sN) l="spindle, $NOK queues (of $NS)" ;; hN) l="heap table per queue, $N tables" ;;
    s10) l="spindle, 10 queues" ;; h10) l="heap table per queue, 10 tables" ;;
    esac
    printf '%-40s %10s %10s\n' "$l" "$(median < "$tmp/$x.cold")" "$(median < "$tmp/$x.warm")"
done
ratio() { calc "$(median < "$tmp/$1.warm") / $(median < "$tmp/$2.warm")"; }
echo "   warm ratios: sN / s10 $(ratio sN s10), sN / hN $(ratio sN hN), hN / h10 $(ratio hN h10), s10 / h10 $(ratio s10 h10)"
# the median of each round's own ratio
rr() { for ((r = 1; r <= ROUNDS; r++)); do
        echo "$(median < "$tmp/$1.r$r") $(median < "$tmp/$2.r$r")"; done | awk '{print $1 / $2}' | median; }
echo "   median of the rounds' own ratios: sN / s10 $(rr sN s10), sN / hN $(rr sN hN)"
echo "   rounds' medians: $(for x in sN hN s10 h10; do printf '%s: ' $x; for ((r = 1; r <= ROUNDS; r++)); do printf '%s ' "$(median < "$tmp/$x.r$r")"; done; printf '| '; done)"
echo
echo "== shared memory (bytes): spindle's named allocations; all allocations with spindle minus without"
while read -r named diff label; do printf '  %-28s %14s %14s\n' "$label" "$named" "$diff"; done < "$tmp/shm"
echo "   $(q "SELECT string_agg(name || '=' || allocated_size, ' ' ORDER BY name) FROM pg_shmem_allocations WHERE name LIKE 'spindle%'")"
echo
echo "== on disk after the passes: spindle queues $(q "SELECT pg_size_pretty(sum(size_bytes)) FROM spindle.spindles WHERE relation::text ~ '^spindle_q\\.q[0-9]+$'") in spindles" \
     "+ $(q "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE (n.nspname = 'spindle_q' AND c.relname ~ '^q[0-9]+$' AND c.relkind = 'r') OR n.nspname = 'pg_spindle' AND c.relname ~ '^c'")" \
     "tables and consumer relations; heap tables $(q "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c WHERE c.relname ~ '^h[0-9]+$' AND c.relkind = 'r'")"
echo "== errors"
if [[ -f $tmp/errors ]]; then cat "$tmp/errors"; else echo "  none"; fi
