#!/usr/bin/env bash
# Warm rebuild of cuda+vulkan on a lent GPU machine, BEFORE and this checkout side by side in one run: one cold build
# fills ccache (and this checkout's shader cache), then each checkout deletes the build tree and rebuilds, twice,
# alternating. OUT receives each run's receipt and .ninja_log, also as one OUT/runs.tgz (the device tool brings back
# few files). PAYLOAD as bench/recorders/gpu-setup.sh describes.
set -uo pipefail
payload=${1:?usage: gpu-warm-rebuild.sh PAYLOAD BEFORE_DIR OUT}
before=$(realpath "${2:?usage: gpu-warm-rebuild.sh PAYLOAD BEFORE_DIR OUT}")
out=$(realpath -m "${3:?usage: gpu-warm-rebuild.sh PAYLOAD BEFORE_DIR OUT}")
repo=$PWD
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
export BUILDMGR_CCACHE=/tmp/site/bin/ccache CCACHE_DIR=/tmp/ccache
args=(cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF)
cd /tmp || exit 1  # `python -m` puts the working directory first on sys.path: it must not hold a checkout
build() {  # TAG CHECKOUT ARGS…
    local tag=$1 checkout=$2
    shift 2
    local start=$EPOCHREALTIME
    PYTHONPATH=$checkout:/tmp/site python3 -m buildmgr build "${args[@]}" "$@" >"$out/$tag.txt" 2>&1
    echo "exit $? wall $(python3 -c "print(round($EPOCHREALTIME - $start, 1))") s" >>"$out/$tag.txt"
    local prefix
    prefix=$(PYTHONPATH=$repo:/tmp/site python3 -m buildmgr which cuda+vulkan)
    cp "$prefix/buildmgr-receipt.json" "$out/$tag.receipt.json"
    cp "$XDG_CACHE_HOME"/buildmgr/build-trees/cuda+vulkan-*/build/.ninja_log "$out/$tag.ninja_log"
    tail -1 "$out/$tag.txt"
}
PYTHONPATH=$repo:/tmp/site python3 -m buildmgr which cuda+vulkan >/dev/null 2>&1 || build cold "$repo"
for round in 1 2; do
    for side in before:"$before" now:"$repo"; do
        rm -rf "$XDG_CACHE_HOME"/buildmgr/build-trees/cuda+vulkan-*
        build "warm-${side%%:*}-$round" "${side#*:}" --rebuild
    done
done
tar czf "$out/runs.tgz" -C "$out" --exclude runs.tgz .
