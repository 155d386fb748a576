#!/usr/bin/env bash
# Check that src/ keeps its layers (docs/design.md, "Layers"):
#
#   storage  <  table  <  queue  <  admin
#
# Every C file lives in one layer's folder; a file may include the header of
# its own layer or of a layer below, never one above; no .c file declares
# an extern of its own (which could name a function of a higher layer
# without its header).  Prints one line per violation and exits 1 if there
# is any.
#
#   test/check_layers.sh [SRC-DIR]     check a tree (default: src/ here)
#   test/check_layers.sh --selftest    check that the checker catches an
#                                      upward include, a stray file and an
#                                      extern (on a scratch tree)
set -uo pipefail

LAYERS=(storage table queue admin)

rank() {
    local i
    for i in "${!LAYERS[@]}"; do
        [[ ${LAYERS[$i]} == "$1" ]] && { echo "$i"; return; }
    done
    echo -1
}

check() {
    local src=$1 bad=0 f rel layer r inc target tr
    while IFS= read -r f; do
        rel=${f#"$src"/}
        layer=${rel%%/*}
        r=$(rank "$layer")
        if [[ $rel != */* ]] || ((r < 0)); then
            echo "layers: $rel: not in a layer folder (${LAYERS[*]})"
            bad=1
            continue
        fi
        while IFS= read -r inc; do
            target=${inc%%/*}
            [[ $inc == */* ]] || target=""
            tr=$(rank "$target")
            if [[ -z $target ]] || ((tr < 0)); then
                # a header of this project without a layer folder?
                if [[ -e $src/$inc || -e $src/$layer/$inc ]]; then
                    echo "layers: $rel includes \"$inc\": name the layer's header (layer/spindle_layer.h)"
                    bad=1
                fi
                continue
            fi
            if ((tr > r)); then
                echo "layers: $rel ($layer) includes \"$inc\" of the higher layer $target"
                bad=1
            fi
        done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$f")
        if [[ $f == *.c ]] && grep -nE '^[[:space:]]*extern[[:space:]]' "$f" >/dev/null; then
            echo "layers: $rel declares an extern: declare it in its layer's header"
            bad=1
        fi
    done < <(find "$src" -type f -name '*.[ch]' | sort)
    return $bad
}

selftest() {
    local tmp rc=0 out
    tmp=$(mktemp -d)
    mkdir -p "$tmp/src/storage" "$tmp/src/table"
    echo '#include "table/spindle_table.h"' >"$tmp/src/storage/a.c"
    out=$(check "$tmp/src") && { echo "selftest: an upward include passed"; rc=1; }
    grep -q 'higher layer table' <<<"$out" || { echo "selftest: upward include not named"; rc=1; }
    echo '#include "storage/spindle_storage.h"' >"$tmp/src/storage/a.c"
    check "$tmp/src" >/dev/null || { echo "selftest: a clean tree failed"; rc=1; }
    echo 'int x;' >"$tmp/src/stray.c"
    check "$tmp/src" >/dev/null && { echo "selftest: a file outside the layers passed"; rc=1; }
    rm "$tmp/src/stray.c"
    echo 'extern void spindle_worker_nudge(void);' >>"$tmp/src/table/b.c"
    check "$tmp/src" >/dev/null && { echo "selftest: an extern in a .c passed"; rc=1; }
    rm -rf "$tmp"
    return $rc
}

if [[ ${1:-} == --selftest ]]; then
    selftest && echo "layers: selftest ok"
    exit $?
fi
SRC=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/src}
if check "$SRC"; then
    echo "layers: ok ($(find "$SRC" -type f -name '*.[ch]' | wc -l) files in ${#LAYERS[@]} layers)"
else
    exit 1
fi
