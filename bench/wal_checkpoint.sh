#!/usr/bin/env bash
# bench/wal_checkpoint.sh (make bench-wal-checkpoint): WAL bytes per
# consumed event when a CHECKPOINT falls between enqueue and dequeue, so that
# the consumers' first change to each page after it writes a full-page image
# (issue 19).  For each system, ROUNDS times, alternating the systems (the
# order rotates each round):
#
#   enqueue BENCH_EVENTS events (not measured), CHECKPOINT, then consume them
#   all, one transaction per call, from a DO block (COMMIT after each call, no
#   client round trip), and measure pg_current_wal_insert_lsn() before and
#   after the drain; then wait SETTLE seconds (what the spindle worker does
#   after the drain), the system's own cleanup (below) and the LSN again.
#   SETTLE seconds pass between the fill and the CHECKPOINT too, so that
#   what the worker does after a fill happens before the checkpoint in every
#   round rather than in some.  pg_waldump --stats=record of the whole
#   range (drain, wait, cleanup) splits its WAL into record types, record
#   bytes and full-page-image bytes.
#
#   dequeue     spindle.dequeue(q, 100) until it returns nothing; cleanup:
#               spindle.drop_spindles(q) (the worker would do the same)
#   read_ack    spindle.read(q, 100, '1 h') and, in the next transaction,
#               spindle.ack(q, <the 100 ids>); cleanup as dequeue
#               (both with spindle.consume_log = off in the consumer's
#               session, on a fresh queue: the consumer purges event pages
#               by xmax)
#   dequeue_log, read_ack_log   the same with spindle.consume_log = on:
#               consumers record what they take in the queue's consume log
#               instead of purging event pages
#   heap        a heap table (id bigserial primary key, enqueued_at, payload):
#               DELETE ... WHERE id = ANY (ARRAY(SELECT id ... ORDER BY id
#               LIMIT 100 FOR UPDATE SKIP LOCKED)) RETURNING *; autovacuum
#               on; cleanup: VACUUM of the table
#   pgq         PgQ (postgresql-15-pgq3), when installed: batches of 100 (one
#               tick after every 100 events of the fill), next_batch,
#               get_batch_events, finish_batch per transaction; cleanup:
#               pgq.maint_operations() (at the default rotation period of 2 h
#               it rotates nothing: PgQ frees its events by TRUNCATE later;
#               the VACUUMs of its own tables it asks for are run)
#
# PGMQ is not part of the harness (no Debian package): not measured.
#
# Settings: PostgreSQL's and spindle's defaults (the worker on), except
# checkpoint_timeout = 1 h, max_wal_size = 8 GB and wal_keep_size = 8 GB, so
# that no checkpoint but the script's own falls in a drain and pg_waldump
# still finds its WAL, and autovacuum = off: with data checksums the first
# process to read a page after the checkpoint writes its image (hint bits),
# and an autovacuum ANALYZE of the freshly filled table, racing the drain,
# would take that image some rounds and not others.  The heap's VACUUM is
# measured as its cleanup instead.
#
#   PG_CONFIG     the PostgreSQL installation (spindle installed in it)
#   BENCH_EVENTS  events per drain (default 50000)
#   BENCH_INITDB_OPTS  options of initdb: -k for data checksums, with which
#                 the first hint bit a reader sets on a page after a
#                 checkpoint writes its image too (as wal_log_hints = on)
#   ROUNDS        rounds (default 3); SETTLE: the waits above (default 3 s,
#                 3 naptimes of the worker)
#   BENCH_PORT    the cluster's port (default 5518); BENCH_KEEP=1 keeps it
# Usage: [BENCH_EVENTS=50000] [ROUNDS=3] bench/wal_checkpoint.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=wal_checkpoint.sh
PORT=${BENCH_PORT:-5518}
N=${BENCH_EVENTS:-50000}
ROUNDS=${ROUNDS:-3}
SETTLE=${SETTLE:-3}
EXTRA_CONF="checkpoint_timeout = '1h'
max_wal_size = '8GB'
wal_keep_size = '8GB'
autovacuum = off"
source "$ROOT/bench/lib.sh"
((N % 100 == 0)) || fail "BENCH_EVENTS must be a multiple of 100"

cluster_start
SYSTEMS="dequeue read_ack dequeue_log read_ack_log heap"
if [[ -f $("$PG_CONFIG" --sharedir)/extension/pgq.control ]]; then
    q "CREATE EXTENSION pgq" >/dev/null
    SYSTEMS="$SYSTEMS pgq"
else
    echo "  PgQ is not installed (postgresql-15-pgq3): not measured"
fi
header "BENCH_EVENTS = $N, $ROUNDS rounds, data checksums $(q "SHOW data_checksums"), wal_log_hints $(q "SHOW wal_log_hints")"

fill() {        # fill SYSTEM: a fresh queue of N events
    case $1 in
    dequeue | read_ack | dequeue_log | read_ack_log)
        q "SELECT spindle.drop_queue('$1', true)" >/dev/null
        q "SELECT spindle.create_queue('$1')" >/dev/null
        q "SELECT count(*) FROM spindle.enqueue_batch('$1', array_fill('$PAYLOAD'::jsonb, ARRAY[$N]))" >/dev/null ;;
    heap)
        q "DROP TABLE IF EXISTS hq" >/dev/null
        q "CREATE TABLE hq (id bigserial PRIMARY KEY, enqueued_at timestamptz NOT NULL DEFAULT now(), payload jsonb)"
        q "INSERT INTO hq (payload) SELECT '$PAYLOAD' FROM generate_series(1, $N)" ;;
    pgq)
        q "SELECT pgq.drop_queue('q', true) FROM pgq.queue WHERE queue_name = 'q'" >/dev/null
        q "SELECT pgq.create_queue('q'); SELECT pgq.register_consumer('q', 'c')" >/dev/null
        q "SELECT pgq.set_queue_config('q', 'ticker_max_count', '100')" >/dev/null
        q "DO \$\$ BEGIN FOR i IN 1..$((N / 100)) LOOP
             PERFORM pgq.insert_event('q', 'ev', '$PAYLOAD') FROM generate_series(1, 100); COMMIT;
             PERFORM pgq.ticker('q'); COMMIT; END LOOP; END \$\$" ;;
    esac
}
drain() {       # drain SYSTEM: consume everything; prints the events taken
    local body
    local opts=""
    case $1 in
    *_log) opts="-c spindle.consume_log=on" ;;
    dequeue | read_ack) opts="-c spindle.consume_log=off" ;;
    esac
    case $1 in
    dequeue | dequeue_log) body="SELECT count(*) INTO n FROM spindle.dequeue('$1', 100);" ;;
    read_ack | read_ack_log)
        body="SELECT count(*), array_agg(msg_id) INTO n, ids FROM spindle.read('$1', 100, '1 h');
                    COMMIT;
                    IF n > 0 THEN PERFORM count(*) FROM spindle.ack('$1', ids); END IF;" ;;
    heap) body="WITH d AS (DELETE FROM hq WHERE id = ANY (ARRAY(SELECT id FROM hq ORDER BY id LIMIT 100
                                                       FOR UPDATE SKIP LOCKED))
                           RETURNING id, enqueued_at, payload)
                SELECT count(*) INTO n FROM d;" ;;
    pgq) body="bid := pgq.next_batch('q', 'c');
               IF bid IS NULL THEN n := 0;
               ELSE SELECT count(*) INTO n FROM pgq.get_batch_events(bid);
                    PERFORM pgq.finish_batch(bid); END IF;" ;;
    esac
    BENCH_PGOPTIONS="$opts" q "DO \$\$ DECLARE n bigint; ids bigint[]; bid bigint; total bigint := 0; BEGIN
         LOOP $body COMMIT; total := total + n; EXIT WHEN n = 0; END LOOP;
         RAISE WARNING 'taken %', total; END \$\$" 2>&1 | sed -n 's/.*taken \([0-9]*\).*/\1/p'
}
cleanup_sys() {
    case $1 in
    dequeue | read_ack | dequeue_log | read_ack_log)
        q "SELECT spindle.drop_spindles('spindle_q.$1')" >/dev/null ;;
    heap) q "VACUUM hq" ;;
    pgq) # what pgqd runs: maint_operations(), whose "vacuum" rows name tables
         # to VACUUM (a statement of its own)
        q "DO \$\$ DECLARE r record; BEGIN FOR r IN SELECT * FROM pgq.maint_operations() LOOP
              IF r.func_name = 'vacuum' THEN CONTINUE;
              ELSIF r.func_arg IS NULL THEN EXECUTE 'SELECT ' || r.func_name || '()';
              ELSE EXECUTE 'SELECT ' || r.func_name || '(\$1)' USING r.func_arg; END IF;
            END LOOP; END \$\$"
        for t in $(q "SELECT func_arg FROM pgq.maint_operations() WHERE func_name = 'vacuum'"); do
            q "VACUUM $t"
        done ;;
    esac
}
# waldump SYSTEM START END: the drain's WAL by record type
# (a transaction with an xid commits first, so that the range is flushed:
# pg_waldump stops with an error at an unflushed record)
waldump() {
    q "SELECT txid_current()" >/dev/null
    "${AS_PG[@]}" "$BIN/pg_waldump" -p "$tmp/data/pg_wal" -s "$2" -e "$3" --stats=record 2>"$tmp/waldump.err" |
        sed 's/([^)]*)//g; s/\[[^]]*\]//g' > "$tmp/waldump.$1" ||
        echo "  warning: pg_waldump of $1 failed: $(head -1 "$tmp/waldump.err")"
}

set -- $SYSTEMS
nsys=$#
for ((r = 1; r <= ROUNDS; r++)); do
    # the order rotates: each system comes first once every nsys rounds
    order=()
    for ((i = 0; i < nsys; i++)); do
        j=$(((i + r - 1) % nsys + 1)); order+=("${!j}")
    done
    printf '  round %d/%d, B per event, drain (all):' "$r" "$ROUNDS"
    for s in "${order[@]}"; do
        fill "$s"
        sleep "$SETTLE"
        q "CHECKPOINT"
        read -r s0 b0 <<<"$(q "SELECT l, l - '0/0'::pg_lsn FROM pg_current_wal_insert_lsn() l" | tr '|' ' ')"
        got=$(drain "$s")
        read -r s1 b1 <<<"$(q "SELECT l, l - '0/0'::pg_lsn FROM pg_current_wal_insert_lsn() l" | tr '|' ' ')"
        sleep "$SETTLE"
        cleanup_sys "$s"
        read -r s2 b2 <<<"$(q "SELECT l, l - '0/0'::pg_lsn FROM pg_current_wal_insert_lsn() l" | tr '|' ' ')"
        [[ $got == "$N" ]] || echo "  warning: $s took $got events, not $N"
        calc "($b1 - $b0) / $N" >> "$tmp/drain.$s"
        calc "($b2 - $b0) / $N" >> "$tmp/all.$s"
        ((r < ROUNDS)) || waldump "$s" "$s0" "$s2"
        printf ' %s %s (%s)' "$s" "$(tail -1 "$tmp/drain.$s")" "$(tail -1 "$tmp/all.$s")"
    done
    echo
done

echo
echo "== medians of $ROUNDS rounds, WAL bytes per consumed event (CHECKPOINT before each drain)"
printf '%-10s %12s %18s %12s %12s %14s\n' system drain "+ wait, cleanup" records FPI "all vs heap"
hd=$(median < "$tmp/all.heap")
for s in $SYSTEMS; do
    d=$(median < "$tmp/drain.$s"); a=$(median < "$tmp/all.$s")
    read -r rec fpi <<<"$(awk -v n="$N" '$1 == "Total" {printf "%.1f %.1f", $3 / n, $4 / n}' "$tmp/waldump.$s")"
    printf '%-10s %12s %18s %12s %12s %14.2f\n' "$s" "$d" "$a" "$rec" "$fpi" "$(calc "$a / $hd")"
done
echo "   rounds, drain: $(for s in $SYSTEMS; do printf '%s: %s| ' "$s" "$(tr '\n' ' ' < "$tmp/drain.$s")"; done)"
echo "   rounds, all:   $(for s in $SYSTEMS; do printf '%s: %s| ' "$s" "$(tr '\n' ' ' < "$tmp/all.$s")"; done)"
echo "   records and FPI: pg_waldump --stats=record of the last round's drain + wait + cleanup, bytes per event"
echo
echo "== the last round's drain + wait + cleanup by record type (pg_waldump --stats=record; rows of >= 1 % of"
echo "   the drain's bytes), bytes per event: records, FPI, combined; count per event"
for s in $SYSTEMS; do
    echo "-- $s"
    awk -v n="$N" '$1 == "Total" {tot = $5} {row[NR] = $0} END {
        for (i = 1; i <= NR; i++) { split(row[i], f, " ");
            if (f[1] == "Total" || f[1] == "Type" || f[1] ~ /^-/ || f[5] == "" || f[5] + 0 < tot / 100) continue;
            printf "   %-34s %8.1f %8.1f %8.1f %8.3f\n", f[1], f[3] / n, f[4] / n, f[5] / n, f[2] / n } }' \
        "$tmp/waldump.$s"
done
