#!/usr/bin/env bash
# Cold builds on a lent GPU machine, in one run (machines of one kind differ by ±25 %, so only same-run ratios count):
#   1. `buildmgr build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF` with an empty ccache and an empty shader cache;
#   2. the hand-typed anchor: `cmake -G Ninja` with the same resolved and host defines (read from 1's receipt), then
#      `cmake --build` of the same targets, no ccache, timed as one call;
#   3. DL reuse: `build universal`, then `build universal+vulkan` on a second empty ccache; bench/dl_reuse.py counts
#      the second build's hits (ccache's log) among the compilations the two share.
#   4. a warm `--rebuild` of 1 (fresh build tree) under cProfile: where buildmgr's own time goes.
# STEPS picks some of "anchor dl profile" (default: all). OUT receives each step's output, receipts, .ninja_logs and
# ccache stats, and a runs.tgz of all of them. Long: start it with setsid and poll OUT/done. PAYLOAD as
# bench/recorders/gpu-setup.sh describes.
set -uo pipefail
usage="usage: gpu-cold.sh PAYLOAD OUT [STEPS]"
payload=${1:?$usage}
out=$(realpath -m "${2:?$usage}")
steps=${3:-anchor dl profile}
repo=$PWD
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
export BUILDMGR_CCACHE=/tmp/site/bin/ccache
jobs=$(nproc)
cd /tmp || exit 1  # `python -m` puts the working directory first on sys.path: it must not hold a checkout
stamp() { python3 -c "import time; print(f'{time.time():.3f}')"; }
since() { python3 -c "print(round($(stamp) - $1, 1))"; }
bm() { PYTHONPATH=$repo:/tmp/site python3 -m buildmgr "$@"; }
keep() {  # TAG RECIPE: the receipt, the .ninja_log and ccache's counters of the build just made
    local prefix
    prefix=$(bm which "$2")
    cp "$prefix/buildmgr-receipt.json" "$out/$1.receipt.json"
    cp "$XDG_CACHE_HOME"/buildmgr/build-trees/"$2"-*/build/.ninja_log "$out/$1.ninja_log"
    "$BUILDMGR_CCACHE" --print-stats >"$out/$1.ccache.tsv"
}
buildmgr_cold() {  # TAG RECIPE ARGS…
    local tag=$1 recipe=$2 start
    start=$(stamp)
    shift 2
    bm build "$recipe" -j "$jobs" "$@" >"$out/$tag.txt" 2>&1
    echo "exit $? wall $(since "$start") s" | tee -a "$out/$tag.txt"
    keep "$tag" "$recipe"
}

export CCACHE_DIR=/tmp/ccache-cold
gpu=(cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF)
buildmgr_cold buildmgr "${gpu[@]}"

if [[ $steps == *anchor* ]]; then
    source_dir=$(echo "$XDG_DATA_HOME"/buildmgr/sources/llama.cpp-*)
    receipt() { python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print('\n'.join($1))" "$out/buildmgr.receipt.json"; }
    mapfile -t defines < <(receipt "f'-D{k}={v}' for k, v in {**r['recipe']['resolved_defines'], **r['host_defines']}.items()")
    mapfile -t targets < <(receipt "r['recipe']['targets']")
    start=$(stamp)
    env -u CMAKE_C_COMPILER_LAUNCHER -u CMAKE_CXX_COMPILER_LAUNCHER \
        cmake -G Ninja -S "$source_dir" -B /tmp/hand "${defines[@]}" >"$out/hand.txt" 2>&1
    cmake --build /tmp/hand -j "$jobs" --target "${targets[@]}" >>"$out/hand.txt" 2>&1
    echo "exit $? wall $(since "$start") s" | tee -a "$out/hand.txt"
    cp /tmp/hand/.ninja_log "$out/hand.ninja_log"
fi

if [[ $steps == *profile* ]]; then
    rm -rf "$XDG_CACHE_HOME"/buildmgr/build-trees/cuda+vulkan-*
    PYTHONPATH=$repo:/tmp/site python3 -m cProfile -o "$out/warm.prof" -m buildmgr build "${gpu[@]}" -j "$jobs" --rebuild \
        >"$out/warm.txt" 2>&1
    python3 -c "import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(60)" "$out/warm.prof" \
        >"$out/warm-profile.txt"
fi
if [[ $steps == *dl* ]]; then
    export CCACHE_DIR=/tmp/ccache-dl
    buildmgr_cold universal universal
    CCACHE_LOGFILE=/tmp/ccache-dl.log buildmgr_cold universal+vulkan universal+vulkan
    python3 "$repo/bench/dl_reuse.py" "$out/universal.ninja_log" "$out/universal+vulkan.ninja_log" /tmp/ccache-dl.log \
        | tee "$out/dl-reuse.txt"
fi
tar czf "$out/runs.tgz" -C "$out" --exclude runs.tgz .
touch "$out/done"
