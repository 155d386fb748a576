#!/usr/bin/env bash
# Install what spindle needs to build and test on Debian bookworm.
# Idempotent: does nothing if every package is already installed.
# Run as root, or as a user with sudo.
set -euo pipefail

PACKAGES=(
    postgresql-15
    postgresql-server-dev-15
    build-essential
    libipc-run-perl
    perl
    python3-psycopg
    # the benchmark harness (bench/run.sh): the systems it compares, plots
    postgresql-15-pgq3
    postgresql-15-partman
    gnuplot-nox
    bc
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [[ $status != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "setup.sh: all packages already installed (${PACKAGES[*]})"
    exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "setup.sh: missing packages: ${missing[*]}" >&2
    echo "setup.sh: not root and sudo is not available; install them as root" >&2
    exit 1
fi

# apt's output goes to a log, shown if a step fails
LOG=$(mktemp "${TMPDIR:-/tmp}/spindle-setup.XXXXXX.log")
echo "setup.sh: apt-get update (log in $LOG)"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update >"$LOG" 2>&1 ||
    { cat "$LOG" >&2; echo "setup.sh: apt-get update FAILED" >&2; exit 1; }
echo "setup.sh: installing ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}" >>"$LOG" 2>&1 ||
    { cat "$LOG" >&2; echo "setup.sh: apt-get install FAILED" >&2; exit 1; }
rm -f "$LOG"
echo "setup.sh: done"
