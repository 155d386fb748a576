#!/usr/bin/env bash
# Build and install spindle, then run the whole test suite:
#   0. the layering check     (test/check_layers.sh)
#   1. pg_regress            (sql/*.sql vs expected/*.out)
#   2. pg_isolation_regress  (test/specs/*.spec vs test/expected/*.out)
#   3. TAP tests             (test/t/*.pl, with prove)
# Each stage runs even if an earlier one failed. The last line printed is
# "N passed, N failed" (regress tests + isolation tests + TAP test files);
# the exit status is non-zero if anything failed.
#
# As root, the tests run as the `postgres` user on a copy of the tree in a
# temp dir (initdb and postgres refuse to run as root). As any other user,
# they run in place.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

if ! bash "$ROOT/scripts/build.sh"; then
    echo "test.sh: build failed; no test was run" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

# The test-only hooks some TAP tests load (test/modules; never installed by
# the extension's own `make install`).
if [[ $(id -u) -eq 0 ]]; then HSUDO=(); elif command -v sudo >/dev/null 2>&1; then HSUDO=(sudo); else HSUDO=(); fi
if ! make -s -C "$ROOT/test/modules" PG_CONFIG="$PG_CONFIG" >/dev/null ||
   ! "${HSUDO[@]}" make -s -C "$ROOT/test/modules" PG_CONFIG="$PG_CONFIG" install >/dev/null; then
    echo "test.sh: building or installing test/modules failed; no test was run" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

# Do not let the caller's PG* environment leak into the tests.
unset PGHOST PGHOSTADDR PGPORT PGDATABASE PGUSER PGDATA PGSERVICE PGOPTIONS

LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/spindle-test-logs.XXXXXX")
if [[ $(id -u) -eq 0 ]]; then
    if ! id postgres >/dev/null 2>&1; then
        echo "test.sh: user 'postgres' does not exist (is postgresql-15 installed?)" >&2
        exit 1
    fi
    RUNDIR=$(mktemp -d "${TMPDIR:-/tmp}/spindle-test.XXXXXX")
    cp -a "$ROOT/." "$RUNDIR/"
    chown -R postgres:postgres "$RUNDIR"
    AS_PG=(runuser -u postgres --)
    echo "test.sh: running the tests as postgres in a copy of the tree: $RUNDIR"
else
    RUNDIR=$ROOT
    AS_PG=()
    echo "test.sh: running the tests as $(id -un) in $RUNDIR"
fi
cd "$RUNDIR" || exit 1

# Value of a variable of the project's Makefile (e.g. REGRESS), or, for
# "tap-files", the TAP test files that prove would run.
make_var() {
    make -s --no-print-directory PG_CONFIG="$PG_CONFIG" -f Makefile -f - "print-$1" <<'MK'
print-%:
	@:$(info $($*))
print-tap-files:
	@:$(info $(if $(TAP_TESTS),$(wildcard $(if $(PROVE_TESTS),$(PROVE_TESTS),t/*.pl))))
MK
}

PASSED=0
FAILED=0
FAILED_WHAT=()

# Run one stage of `make installcheck`, the other stages' variables emptied.
#   run_stage NAME MAKE-ARGS...    (output in $LOGDIR/NAME.log)
run_stage() {
    local name=$1
    shift
    echo
    echo "================ test.sh: $name ================"
    "${AS_PG[@]}" make --no-print-directory PG_CONFIG="$PG_CONFIG" installcheck "$@" 2>&1 |
        tee "$LOGDIR/$name.log"
    return "${PIPESTATUS[0]}"
}

# Count pg_regress / pg_isolation_regress result lines in a log.
#   count_regress NAME RC EXPECTED-COUNT
count_regress() {
    local name=$1 rc=$2 expected=$3 ok bad
    ok=$(grep -cE '^(test |     )[^ ].* \.\.\. (ok|failed \(ignored\))' "$LOGDIR/$name.log")
    bad=$(grep -cE '^(test |     )[^ ].* \.\.\. FAILED' "$LOGDIR/$name.log")
    if ((rc != 0)); then
        # Tests that never ran (initdb or server start failed) count as failed.
        if ((ok + bad < expected)); then
            bad=$((expected - ok))
        fi
        if ((bad == 0)); then
            bad=1
        fi
    fi
    echo "test.sh: $name: $ok passed, $bad failed"
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + bad))
    if ((bad > 0)); then
        local names
        names=$(grep -E '^(test |     )[^ ].* \.\.\. FAILED' "$LOGDIR/$name.log" |
            awk '{print ($1 == "test") ? $2 : $1}' | tr '\n' ' ')
        if [[ -n $names ]] && ((bad > $(wc -w <<<"$names"))); then
            names+="(and tests that did not run)"
        fi
        FAILED_WHAT+=("$name: ${names:-(no test ran: see the log above)}")
    fi
}

show_file() {
    local f=$1 lines=${2:-}
    [[ -s $f ]] || return 0
    echo
    echo "---------------- $f ----------------"
    if [[ -n $lines ]]; then
        tail -n "$lines" "$f"
    else
        cat "$f"
    fi
}

# ---- 0. layering of src/ (no build or server needed) ----------------------
echo
echo "================ test.sh: layers ================"
if bash "$RUNDIR/test/check_layers.sh" --selftest && bash "$RUNDIR/test/check_layers.sh" "$RUNDIR/src"; then
    echo "test.sh: layers: 1 passed, 0 failed"
    PASSED=$((PASSED + 1))
else
    echo "test.sh: layers: 0 passed, 1 failed"
    FAILED=$((FAILED + 1))
    FAILED_WHAT+=("layers: an include runs upward (test/check_layers.sh)")
fi

# ---- 1. pg_regress --------------------------------------------------------
rm -rf results log regression.diffs regression.out tmp_check
n_regress=$(make_var REGRESS | wc -w)
if ((n_regress > 0)); then
    run_stage regress ISOLATION= TAP_TESTS=
    rc=$?
    count_regress regress "$rc" "$n_regress"
    if ((rc != 0)); then
        show_file "$RUNDIR/regression.diffs"
        show_file "$RUNDIR/log/postmaster.log" 100
    fi
else
    echo "test.sh: no regress tests (REGRESS is empty)"
fi

# ---- 2. pg_isolation_regress ----------------------------------------------
rm -rf output_iso tmp_check_iso
n_iso=$(make_var ISOLATION | wc -w)
if ((n_iso > 0)); then
    run_stage isolation REGRESS= TAP_TESTS=
    rc=$?
    count_regress isolation "$rc" "$n_iso"
    if ((rc != 0)); then
        show_file "$RUNDIR/output_iso/regression.diffs"
        show_file "$RUNDIR/output_iso/log/postmaster.log" 100
    fi
else
    echo "test.sh: no isolation tests (ISOLATION is empty)"
fi

# ---- 3. TAP tests (prove) -------------------------------------------------
read -r -a tap_files <<<"$(make_var tap-files)"

# test/t/038_fault_disk_full.pl and 047_disk_alarm.pl need a small
# filesystem of their own for a tablespace; as root, mount an 8 MB tmpfs
# owned by postgres (the tests skip themselves, saying why, when there is
# none).
SMALL=/mnt/spindle-small
SMALL_MOUNTED=0
if [[ $(id -u) -eq 0 ]] && ! mountpoint -q "$SMALL" 2>/dev/null; then
    if mkdir -p "$SMALL" && mount -t tmpfs -o size=8m,mode=0700 spindle-small "$SMALL" 2>/dev/null; then
        chown postgres:postgres "$SMALL"
        SMALL_MOUNTED=1
    else
        echo "test.sh: could not mount a tmpfs at $SMALL; the disk-full test will skip" >&2
    fi
fi
if ((${#tap_files[@]} > 0)); then
    run_stage tap REGRESS= ISOLATION=
    rc=$?
    log=$LOGDIR/tap.log
    total=$(sed -nE 's/^Files=([0-9]+), Tests=.*/\1/p' "$log" | tail -n 1)
    # Files listed in prove's "Test Summary Report" with a real failure
    # (failed tests, non-zero exit or wait status, parse errors).
    bad_files=$(awk '
        /^Test Summary Report/ { in_report = 1; next }
        /^Files=[0-9]+, Tests=/ { in_report = 0 }
        in_report && /\(Wstat: / { file = $1; next }
        in_report && file != "" && /^  (Failed tests?:|Non-zero (exit|wait) status:|Parse errors:)/ { bad[file] = 1 }
        END { for (f in bad) print f }' "$log")
    bad=0
    [[ -n $bad_files ]] && bad=$(wc -l <<<"$bad_files")
    if [[ -z $total ]]; then
        # prove did not get to its summary: count every test file as failed.
        total=${#tap_files[@]}
        bad=$total
        bad_files=$(printf '%s\n' "${tap_files[@]}")
    elif ((rc != 0 && bad == 0)); then
        bad=1
        bad_files="(prove exited with status $rc)"
    fi
    ok=$((total - bad))
    ((ok < 0)) && ok=0
    echo "test.sh: tap: $ok passed, $bad failed"
    PASSED=$((PASSED + ok))
    FAILED=$((FAILED + bad))
    if ((bad > 0)); then
        FAILED_WHAT+=("tap: $(tr '\n' ' ' <<<"$bad_files")")
        # The logs of the failed test files (regress_log_NAME and the
        # NAME_<node>.log server logs), or all logs if none matches.
        shown=0
        while read -r bf; do
            base=$(basename "$bf" .pl)
            for f in "$RUNDIR/tmp_check/log/regress_log_$base" "$RUNDIR/tmp_check/log/${base}"_*.log; do
                [[ -f $f ]] || continue
                show_file "$f" 300
                shown=1
            done
        done <<<"$bad_files"
        if ((shown == 0)); then
            for f in "$RUNDIR"/tmp_check/log/*; do
                show_file "$f" 300
            done
        fi
    fi
else
    echo "test.sh: no TAP test files"
fi

if ((SMALL_MOUNTED)); then
    umount "$SMALL" 2>/dev/null
fi

# ---- summary --------------------------------------------------------------
echo
echo "================ test.sh: summary ================"
if ((FAILED > 0)); then
    for what in "${FAILED_WHAT[@]}"; do
        echo "FAILED $what"
    done
    echo "test.sh: logs kept in $LOGDIR"
    if [[ $RUNDIR != "$ROOT" ]]; then
        echo "test.sh: test tree kept in $RUNDIR"
    fi
else
    rm -rf "$LOGDIR"
    if [[ $RUNDIR != "$ROOT" ]]; then
        cd / && rm -rf "$RUNDIR"
    fi
fi
echo "$PASSED passed, $FAILED failed"
((FAILED == 0))
