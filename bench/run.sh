#!/usr/bin/env bash
# bench/run.sh: the benchmark harness (`make bench`, `make bench-short`).
#
# Compares spindle (queue API dequeue, read + ack, a plain spindle table
# with SKIP LOCKED) with a heap SKIP LOCKED queue, PgQ and a heap queue
# partitioned by id whose old partitions pg_partman drops, on one throwaway
# cluster (initdb in a temp dir, unix socket only, as user postgres when
# run as root), and writes BENCH_OUT/benchmarks.md with its plots and the
# raw results.json in BENCH_OUT/benchmarks/ (default BENCH_OUT: docs/ of
# this tree for the full mode, a new temp dir for the short mode);
# results.json is copied even when the report fails.  The workloads are described
# in bench/harness.py and in the report itself.
#
#   BENCH_SHORT=1     the short (CI) mode: seconds per workload
#   PG_CONFIG         the PostgreSQL installation to use (spindle must be
#                     installed in it: scripts/build.sh or make install);
#                     default /usr/lib/postgresql/15/bin/pg_config
#   BENCH_PORT        the cluster's port (default 5514; unix socket only)
#   BENCH_KEEP=1      keep the work directory (cluster, logs, raw data)
#   BENCH_*           every other parameter: see CONF in bench/harness.py
#
# As root it first installs the packages it needs (bench/setup.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
PYTHON=${BENCH_PYTHON:-/usr/bin/python3}
[[ $PG_CONFIG == */* ]] || PG_CONFIG=$(command -v "$PG_CONFIG")

if [[ $(id -u) -eq 0 ]]; then
    bash "$ROOT/bench/setup.sh"
fi
PGBIN=$("$PG_CONFIG" --bindir)
PKGLIB=$("$PG_CONFIG" --pkglibdir)
SHARE=$("$PG_CONFIG" --sharedir)
fail() { echo "bench/run.sh: $*" >&2; exit 1; }
[[ -f $PKGLIB/spindle.so ]] ||
    fail "spindle is not installed in $PKGLIB: run scripts/build.sh (or make install) first"
for ext in pgq pg_partman; do
    [[ -f $SHARE/extension/$ext.control ]] ||
        fail "extension $ext is not installed in $SHARE (bench/setup.sh installs it, as root)"
done
command -v gnuplot >/dev/null || fail "gnuplot is missing (bench/setup.sh installs gnuplot-nox)"
[[ -x $PYTHON ]] || fail "$PYTHON is missing"

if [[ -n ${BENCH_SHORT:-} && ${BENCH_SHORT} != 0 ]]; then
    OUT=${BENCH_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/spindle-bench-short.XXXXXX")}
    command="make bench-short"
else
    OUT=${BENCH_OUT:-$ROOT/docs}
    command="make bench"
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/spindle-bench.XXXXXX")
chmod 755 "$WORK"
if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || fail "user postgres does not exist (is postgresql-15 installed?)"
    chown postgres: "$WORK"
    AS_PG=(runuser -u postgres --)
else
    AS_PG=()
fi
cleanup() {
    # the harness stops its server; this is for an interrupted run
    if [[ -f $WORK/data/postmaster.pid ]]; then
        "${AS_PG[@]}" "$PGBIN/pg_ctl" -D "$WORK/data" -m immediate stop >/dev/null 2>&1 || true
    fi
    if [[ -z ${BENCH_KEEP:-} ]]; then rm -rf "$WORK"; else echo "bench/run.sh: work dir kept: $WORK"; fi
}
trap cleanup EXIT

commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if ! git -C "$ROOT" diff --quiet HEAD 2>/dev/null; then commit="$commit (with uncommitted changes)"; fi
echo "bench/run.sh: $command, PostgreSQL in $PGBIN, work dir $WORK, report to $OUT"
rc=0
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGDATA PGSERVICE PGOPTIONS
"${AS_PG[@]}" env BENCH_PGBIN="$PGBIN" BENCH_COMMIT="$commit" BENCH_COMMAND="$command" \
    $(env | grep -o '^BENCH_[A-Z_]*=' | sed 's/=$//' | while read -r v; do printf '%s=%s ' "$v" "${!v}"; done) \
    "$PYTHON" "$ROOT/bench/harness.py" "$WORK" || rc=$?
# The raw results first, whatever happened to the report: they are all a
# run of hours leaves, and cleanup removes the work dir on exit.
mkdir -p "$OUT/benchmarks"
if [[ -f $WORK/results.json ]]; then
    cp "$WORK/results.json" "$OUT/benchmarks/results.json"
    echo "bench/run.sh: raw results in $OUT/benchmarks/results.json"
else
    echo "bench/run.sh: the harness wrote no results.json" >&2
fi
if [[ -f $WORK/report/benchmarks.md ]]; then
    cp "$WORK/report/benchmarks.md" "$OUT/benchmarks.md"
    cp "$WORK"/report/benchmarks/*.png "$OUT/benchmarks/" 2>/dev/null || true
    echo "bench/run.sh: report in $OUT/benchmarks.md, plots in $OUT/benchmarks/"
    if grep -q 'failed to render' "$OUT/benchmarks.md"; then
        echo "bench/run.sh: parts of the report failed to render (see the top of $OUT/benchmarks.md)" >&2
        ((rc)) || rc=1
    fi
else
    echo "bench/run.sh: no report was written" >&2
    if [[ -f $OUT/benchmarks/results.json ]]; then
        echo "bench/run.sh: to render it again from the raw results: mkdir D && cp $OUT/benchmarks/results.json D/ &&" \
            "$PYTHON $ROOT/bench/harness.py --report D (writes D/report/benchmarks.md)" >&2
    fi
    tail -30 "$WORK/server.log" >&2 2>/dev/null || true
    ((rc)) || rc=1
fi
exit $rc
