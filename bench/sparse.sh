#!/usr/bin/env bash
# bench/sparse.sh (make bench-sparse): what do a few stragglers cost a queue
# on disk (issue 19)?  BENCH_EVENTS events go through each queue, in batches
# of 1 000 of which one is a straggler, the rest consumed at once:
#
#   s0   spindle queue (events_per_spindle 10 000), no straggler: each batch
#        is 1 000 ready events
#   sd   the same, the batch's 500th event delayed a day (enqueue(q, p,
#        '1 day'))
#   sl   the same, the batch's first event leased for a day and never acked
#        (read(q, 1, '1 day') after the batch commits)
#   h0, hd, hl   the reference: a heap queue (id bigserial primary key,
#        visible_at timestamptz, payload jsonb; autovacuum on), the same
#        batches; delayed: visible_at = now() + 1 day; leased: UPDATE of the
#        oldest visible row's visible_at to now() + 1 day; consumed by
#        DELETE ... WHERE id = ANY (ARRAY(SELECT id ... WHERE visible_at <=
#        now() ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED)), plus a VACUUM
#        of the table at each sample
#
# After each batch the consumer calls dequeue(q, 100) (or the DELETE) until it
# returns nothing; one transaction per call, in a DO block (no client round
# trip).  The queues advance together, 50 000 events (50 batches) of each in
# turn, in an order that rotates, so the machine's load falls on all alike.
# Every 10 % of BENCH_EVENTS each queue is sampled: its size on disk (a
# spindle queue: the size_bytes of its spindles in spindle.spindles, which
# pg_total_relation_size of the queue's table does not count, plus
# pg_total_relation_size of the table and of its consumer relation; a heap
# queue: pg_total_relation_size after its VACUUM), its spindles, and the
# events its producer was refused (an enqueue that fails is counted, not
# retried).  WAL per event: the WAL position's advance over each queue's
# own turns, summed (the worker's and autovacuum's WAL fall into whichever
# turn is running), against the same queue without stragglers (s0, h0).
#
# Settings: PostgreSQL's and spindle's defaults (the worker on), autovacuum on.
#
#   PG_CONFIG      the PostgreSQL installation (spindle installed in it)
#   BENCH_EVENTS   events through each queue (default 2000000; the full size
#                  is 50000000); a multiple of 100 000
#   BENCH_SYSTEMS  the queues to run (default "s0 sd sl hd", so that the
#                  default size finishes within 10 minutes here; all six:
#                  BENCH_SYSTEMS="s0 sd sl h0 hd hl")
#   BENCH_PORT     the cluster's port (default 5520); BENCH_KEEP=1 keeps it
# Usage: [BENCH_EVENTS=2000000] bench/sparse.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=sparse.sh
PORT=${BENCH_PORT:-5520}
N=${BENCH_EVENTS:-2000000}
SYSTEMS=${BENCH_SYSTEMS:-"s0 sd sl hd"}
STEP=50000
source "$ROOT/bench/lib.sh"
((N % (10 * STEP) == 0)) || fail "BENCH_EVENTS must be a multiple of $((10 * STEP))"

cluster_start
header "BENCH_EVENTS = $N, batches of 1 000 with one straggler, samples every 10 %"
for x in $SYSTEMS; do
    case $x in
    s*) q "SELECT spindle.create_queue('$x', events_per_spindle => 10000)" >/dev/null ;;
    h*) q "CREATE TABLE $x (id bigserial PRIMARY KEY, visible_at timestamptz NOT NULL DEFAULT now(),
                            payload jsonb)" ;;
    esac
    echo 0 > "$tmp/wal.$x"; echo 0 > "$tmp/refused.$x"; echo 0 > "$tmp/secs.$x"
done

# step X: STEP / 1 000 batches through queue X; prints the WAL it wrote
# (bytes), the events its producer was refused in this step and the first
# error
step() {
    local x=$1 enq take lease=""
    case $x in
    s*) enq="PERFORM count(*) FROM spindle.enqueue_batch('$x', array_fill(p, ARRAY[499]));
             PERFORM spindle.enqueue('$x', p, CASE WHEN '$x' = 'sd' THEN interval '1 day' ELSE '0' END);
             PERFORM count(*) FROM spindle.enqueue_batch('$x', array_fill(p, ARRAY[500]));"
        take="SELECT count(*) INTO n FROM spindle.dequeue('$x', 100);"
        [[ $x != sl ]] || lease="PERFORM count(*) FROM spindle.read('$x', 1, '1 day'); COMMIT;" ;;
    h*) enq="INSERT INTO $x (payload) SELECT p FROM generate_series(1, 499);
             INSERT INTO $x (visible_at, payload)
               VALUES (CASE WHEN '$x' = 'hd' THEN now() + interval '1 day' ELSE now() END, p);
             INSERT INTO $x (payload) SELECT p FROM generate_series(1, 500);"
        take="WITH d AS (DELETE FROM $x WHERE id = ANY (ARRAY(SELECT id FROM $x WHERE visible_at <= now()
                                                       ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED))
                         RETURNING id, payload)
              SELECT count(*) INTO n FROM d;"
        [[ $x != hl ]] || lease="UPDATE $x SET visible_at = now() + interval '1 day'
                                  WHERE id = (SELECT id FROM $x WHERE visible_at <= now() ORDER BY id
                                              LIMIT 1 FOR UPDATE SKIP LOCKED); COMMIT;" ;;
    esac
    q "DO \$\$ DECLARE p jsonb := '$PAYLOAD'; n int; refused int := 0; first text;
                       l0 pg_lsn := pg_current_wal_insert_lsn(); BEGIN
         FOR b IN 1..$((STEP / 1000)) LOOP
           BEGIN $enq
           EXCEPTION WHEN others THEN
             refused := refused + 1000; first := coalesce(first, SQLERRM || ' (' || SQLSTATE || ')');
           END;
           COMMIT;
           $lease
           LOOP $take COMMIT; EXIT WHEN n = 0; END LOOP;
         END LOOP;
         RAISE WARNING 'wal % refused % %', pg_current_wal_insert_lsn() - l0, refused, coalesce(first, '');
       END \$\$" 2>&1 | sed -n 's/.*wal \([0-9]*\) refused \([0-9]*\) \(.*\)/\1 \2 \3/p'
}
size() {
    case $1 in
    s*) queue_bytes "$1" ;;
    h*) q "VACUUM $1" >/dev/null; q "SELECT pg_total_relation_size('$1')" ;;
    esac
}
spindles() {
    case $1 in
    s*) q "SELECT count(*) FROM spindle.spindles WHERE relation = 'spindle_q.$1'::regclass" ;;
    h*) echo - ;;
    esac
}
held() {        # events the queue still holds (the stragglers)
    case $1 in
    s*) q "SELECT coalesce(depth::text, '?') || '+' || leased || '+' || delayed FROM spindle.queues WHERE queue_name = '$1'" ;;
    h*) q "SELECT count(*) FROM $1" ;;
    esac
}

set -- $SYSTEMS
nsys=$#
steps=$((N / STEP))
t0=$(now)
printf '%-5s %-4s %14s %9s %16s %9s\n' done queue "size (bytes)" spindles "held" refused > "$tmp/samples"
for ((k = 1; k <= steps; k++)); do
    order=()
    for ((i = 0; i < nsys; i++)); do j=$(((i + k - 1) % nsys + 1)); order+=("${!j}"); done
    for x in "${order[@]}"; do
        s0=$(now)
        read -r wal ref first <<<"$(step "$x")"
        secs=$(calc "$(cat "$tmp/secs.$x") + $(now) - $s0" %.3f)
        echo "$secs" > "$tmp/secs.$x"
        if ((k * 10 % steps == 0)) && [[ $x == h* ]]; then
            b0=$(lsn); q "VACUUM $x" >/dev/null; wal=$((wal + $(lsn) - b0))
        fi
        echo "$(($(cat "$tmp/wal.$x") + wal))" > "$tmp/wal.$x"
        if [[ ${ref:-0} != 0 ]]; then
            echo "$(($(cat "$tmp/refused.$x") + ref))" > "$tmp/refused.$x"
            [[ -f $tmp/first.$x ]] || echo "$first" > "$tmp/first.$x"
        fi
    done
    if ((k * 10 % steps == 0)); then
        pct=$((k * 100 / steps))
        for x in $SYSTEMS; do
            printf '%4d%% %-4s %14s %9s %16s %9s\n' "$pct" "$x" "$(size "$x")" "$(spindles "$x")" \
                "$(held "$x")" "$(cat "$tmp/refused.$x")" >> "$tmp/samples"
        done
        echo "  $pct % after $(since "$t0") s"
    fi
done

echo
echo "== samples (held: spindle depth+leased+delayed from spindle.queues; heap rows)"
cat "$tmp/samples"
echo
echo "== WAL per event (the WAL position's advance over each queue's turns / $N)"
for x in $SYSTEMS; do
    w=$(calc "$(cat "$tmp/wal.$x") / $N" %.1f)
    base=${x:0:1}0
    if [[ -f $tmp/wal.$base && $x != "$base" ]]; then
        printf '  %-4s %8s B/event, %5.2f x %s\n' "$x" "$w" "$(calc "$(cat "$tmp/wal.$x") / $(cat "$tmp/wal.$base")")" "$base"
    else
        printf '  %-4s %8s B/event\n' "$x" "$w"
    fi
done
echo "== time in each queue's turns (s; the machine is shared: indicative only)"
for x in $SYSTEMS; do printf '  %-4s %8.1f s, %8.0f events/s\n' "$x" "$(cat "$tmp/secs.$x")" "$(calc "$N / $(cat "$tmp/secs.$x")" %.0f)"; done
echo "== producers refused"
for x in $SYSTEMS; do
    printf '  %-4s %s events refused%s\n' "$x" "$(cat "$tmp/refused.$x")" \
        "$([[ -f $tmp/first.$x ]] && echo ", first: $(cat "$tmp/first.$x")")"
done
