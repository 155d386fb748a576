#!/usr/bin/env bash
# Build spindle with PGXS and install it into PostgreSQL 15.
# Runs setup.sh first; `make install` runs as root (via sudo if needed).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

bash "$ROOT/scripts/setup.sh"

if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    SUDO=()
    echo "build.sh: not root and no sudo: trying make install as $(id -un)" >&2
fi

cd "$ROOT"
# One line per step; the compiler's output goes to a log, shown on failure.
LOG=$(mktemp "${TMPDIR:-/tmp}/spindle-build.XXXXXX.log")
echo "build.sh: compiling spindle (make PG_CONFIG=$PG_CONFIG, log in $LOG)"
if ! make -j"$(nproc)" PG_CONFIG="$PG_CONFIG" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo >&2
    echo "************************************************************" >&2
    echo "build.sh: BUILD FAILED (compiler or make error, see above)" >&2
    echo "************************************************************" >&2
    exit 1
fi
if grep -q "warning:" "$LOG"; then
    grep "warning:" "$LOG" >&2
fi

echo "build.sh: installing (make install)"
if ! "${SUDO[@]}" make PG_CONFIG="$PG_CONFIG" install >>"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "build.sh: INSTALL FAILED (make install, see above)" >&2
    exit 1
fi
rm -f "$LOG"
echo "build.sh: spindle built and installed into $("$PG_CONFIG" --pkglibdir)"
