#!/usr/bin/env bash
# bench/setup.sh: install what the benchmark harness needs besides spindle:
# PgQ, pg_partman (the systems it compares) and gnuplot (the plots), from
# Debian's packages.  Idempotent; run as root or with sudo.
set -euo pipefail
PACKAGES=(postgresql-15-pgq3 postgresql-15-partman gnuplot-nox)
missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]} == 0)); then
    echo "bench/setup.sh: all packages already installed (${PACKAGES[*]})"
    exit 0
fi
if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "bench/setup.sh: missing packages: ${missing[*]}; not root and no sudo: install them as root" >&2
    exit 1
fi
LOG=$(mktemp "${TMPDIR:-/tmp}/spindle-bench-setup.XXXXXX.log")
echo "bench/setup.sh: installing ${missing[*]} (log in $LOG)"
{ "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update &&
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } \
    >"$LOG" 2>&1 || { cat "$LOG" >&2; echo "bench/setup.sh: apt-get FAILED" >&2; exit 1; }
rm -f "$LOG"
echo "bench/setup.sh: done"
