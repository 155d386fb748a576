#!/usr/bin/env bash
# bench/catalog_churn.sh: do the system catalogs stay bounded while spindles
# are created and dropped all the time?
#
# A queue with events_per_spindle = 1000 under a steady load for MINUTES:
# a producer inserts RATE events/s (one per transaction, 2 clients), a
# consumer deletes the 10 oldest events per transaction (FOR UPDATE SKIP
# LOCKED through a btree on id) at up to 1.5x that rate, the spindle
# worker creates and drops the spindles (one of each per second at the
# defaults), autovacuum runs with the server's settings.  Every SAMPLE
# seconds (default 30) it prints, in kB, pg_relation_size / pg_total_
# relation_size of pg_class, pg_attribute, pg_type, pg_depend, pg_shdepend
# and spindle.spindle_catalog, the queue's own total size (the table and its
# indexes plus every spindle with its TOAST table), the spindles and the
# backlog; at the end the first and last sample, the largest sample of each
# half of the run and their ratio (bounded: the second half's largest is not
# above the first half's), the dead rows left in each catalog and how often
# autovacuum vacuumed and analyzed it.
#
# The table lives in a database of its own, spindle_churn, made and dropped
# here, so the catalogs measured hold nothing else (pg_shdepend is shared
# by the cluster).  Needs a running server with spindle preloaded and a
# superuser (CREATE DATABASE, ALTER SYSTEM: the worker is turned on for the
# run and spindle.enable_worker put back as it was); PGHOST, PGPORT, PGUSER
# select it, PGDATABASE the database for the administrative commands.
# Only psql and pgbench are used.
# Usage: bench/catalog_churn.sh [MINUTES] [RATE]
set -euo pipefail
MINUTES=${1:-10}
RATE=${2:-1000}
SAMPLE=${SAMPLE:-30}
SECS=$((MINUTES * 60))
BIN=${PGBIN:-/usr/lib/postgresql/15/bin}
DB=spindle_churn
PAYLOAD='{"type":"order","customer":12345,"items":[1,2,3],"note":"some payload text for a realistic size","ts":"2026-11-30T11:00:00Z"}'
CATALOGS=(pg_class pg_attribute pg_type pg_depend pg_shdepend spindle.spindle_catalog)
tmp=$(mktemp -d)
chmod 755 "$tmp"
psql() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
admin() { psql -At -c "$*"; }
q() { psql -At -d "$DB" -c "$*"; }

orig_enable=$(admin "SELECT setting FROM pg_file_settings
                      WHERE name = 'spindle.enable_worker' AND sourcefile LIKE '%postgresql.auto.conf'
                      ORDER BY seqno DESC LIMIT 1")
cleanup() {
    set +e
    kill $(jobs -p) 2>/dev/null
    wait 2>/dev/null
    if [[ -n $orig_enable ]]; then
        admin "ALTER SYSTEM SET spindle.enable_worker = '$orig_enable'"
    else
        admin "ALTER SYSTEM RESET spindle.enable_worker"
    fi
    admin "SELECT pg_reload_conf()" >/dev/null
    admin "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
    rm -rf "$tmp"
}
trap cleanup EXIT

admin "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
admin "CREATE DATABASE $DB"
psql -d "$DB" <<SQL
CREATE EXTENSION spindle;
CREATE TABLE churn (id bigserial PRIMARY KEY, body jsonb) USING spindle
    WITH (events_per_spindle = 1000);
SQL
admin "ALTER SYSTEM SET spindle.enable_worker = on"
admin "SELECT pg_reload_conf()" >/dev/null

echo "INSERT INTO churn (body) VALUES ('$PAYLOAD');" > "$tmp/produce.sql"
echo "DELETE FROM churn WHERE id IN (SELECT id FROM churn ORDER BY id LIMIT 10 FOR UPDATE SKIP LOCKED);" \
    > "$tmp/consume.sql"
chmod 644 "$tmp"/*.sql

# one line: t, rel/total kB of each catalog, queue kB, spindles, backlog
sample_sql="SELECT concat_ws(' ', $(
    for c in "${CATALOGS[@]}"; do
        printf "pg_relation_size('%s') / 1024, pg_total_relation_size('%s') / 1024, " "$c" "$c"
    done)
    (pg_total_relation_size('churn') +
     coalesce((SELECT size_bytes FROM spindle.tables WHERE relation = 'churn'::regclass), 0)) / 1024,
    (SELECT count(*) FROM spindle.spindle_catalog),
    (SELECT count(*) FROM churn))"
stats_sql="SELECT concat_ws(' ', relname, n_dead_tup, n_live_tup, autovacuum_count, autoanalyze_count)
             FROM pg_stat_all_tables
            WHERE relid IN ($(printf "'%s'::regclass," "${CATALOGS[@]}" | sed 's/,$//'))
            ORDER BY relname"

header() {
    printf '%5s' t
    for c in "${CATALOGS[@]}"; do printf ' %19s' "${c#spindle.}"; done
    printf ' %10s %8s %8s\n' "queue" spindles backlog
    printf '%5s' s
    for c in "${CATALOGS[@]}"; do printf ' %19s' "rel/total kB"; done
    printf ' %10s %8s %8s\n' kB "" events
}
show() {    # t, then the fields of one sample
    local t=$1; shift
    local -a f=("$@")
    printf '%5d' "$t"
    local i
    for ((i = 0; i < ${#CATALOGS[@]}; i++)); do
        printf ' %19s' "${f[2 * i]}/${f[2 * i + 1]}"
    done
    printf ' %10s %8s %8s\n' "${f[2 * ${#CATALOGS[@]}]}" "${f[2 * ${#CATALOGS[@]} + 1]}" \
        "${f[2 * ${#CATALOGS[@]} + 2]}"
}

q "$stats_sql" | sort > "$tmp/stats.before"
echo "== $RATE events/s for $MINUTES min, events_per_spindle = 1000, worker on, autovacuum as configured"
header
read -r -a first <<<"$(q "$sample_sql")"
show 0 "${first[@]}"
echo "0 ${first[*]}" > "$tmp/series"

"$BIN/pgbench" -n -f "$tmp/produce.sql" -R "$RATE" -T "$SECS" -c 2 -j 2 "$DB" \
    >"$tmp/produce.log" 2>&1 &
prod=$!
"$BIN/pgbench" -n -f "$tmp/consume.sql" -R $((RATE * 3 / 20)) -T "$SECS" -c 1 "$DB" \
    >"$tmp/consume.log" 2>&1 &
cons=$!
start=$(date +%s)
for ((s = SAMPLE; s <= SECS; s += SAMPLE)); do
    wait_s=$((start + s - $(date +%s)))
    ((wait_s > 0)) && sleep "$wait_s"
    read -r -a cur <<<"$(q "$sample_sql")"
    show "$s" "${cur[@]}"
    echo "$s ${cur[*]}" >> "$tmp/series"
done
wait "$prod" "$cons" || true
printf 'produced %s events/s, consumed %s events/s (10 per transaction)\n' \
    "$(awk '/^tps =/ {print int($3)}' "$tmp/produce.log")" \
    "$(awk '/^tps =/ {print int($3) * 10}' "$tmp/consume.log")"
q "SELECT concat_ws(' ', 'worker dropped', spindles_dropped, 'spindles,', pg_size_pretty(bytes_freed), 'freed')
     FROM spindle.worker WHERE database = current_database()"

# first sample, largest sample of each half, last sample; bounded means the
# second half's largest is not above the first half's
nsamples=$(wc -l < "$tmp/series")
half=$(( (nsamples + 1) / 2 ))
echo
printf '%-24s %8s %12s %12s %8s %10s %14s\n' "total kB" first "max 1st half" "max 2nd half" last last/first "2nd/1st half"
i=0
for c in "${CATALOGS[@]}" queue; do
    if [[ $c == queue ]]; then col=$((2 * ${#CATALOGS[@]} + 2)); else col=$((2 * i + 3)); fi
    awk -v col="$col" -v half="$half" -v name="$c" '
        NR == 1 {f = $col}
        NR <= half && $col > m1 {m1 = $col}
        NR > half && $col > m2 {m2 = $col}
        {l = $col}
        END {printf "%-24s %8d %12d %12d %8d %10.2f %14.2f\n", name, f, m1, m2, l,
                    (f > 0 ? l / f : 0), (m1 > 0 ? m2 / m1 : 0)}' "$tmp/series"
    i=$((i + 1))
done

echo
echo "catalog             dead rows  live rows  autovacuums  autoanalyzes (during the run)"
q "$stats_sql" | sort > "$tmp/stats.after"
join "$tmp/stats.before" "$tmp/stats.after" |
    awk '{printf "%-20s %9d %10d %12d %13d\n", $1, $6, $7, $8 - $4, $9 - $5}'
