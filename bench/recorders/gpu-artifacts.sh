#!/usr/bin/env bash
# Release artifacts on a lent GPU machine (kind nvidia-h200-x2): build cuda+vulkan --sm 90 and cuda --sm 80,
# package both, install each archive into a fresh data dir, smoke-run it there, and keep what install-artifact
# said about this host (docs/real-runs.md). PAYLOAD is what bench/recorders/gpu-setup.sh describes; OUT receives the captures.
# VARIANTS (default "cuda+vulkan 90,cuda 80"): recipe and --sm of each build, comma-separated.
set -uo pipefail
payload=${1:?usage: gpu-artifacts.sh PAYLOAD OUT}
out=${2:?usage: gpu-artifacts.sh PAYLOAD OUT}
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
bm() { python3 -m buildmgr "$@"; }
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv >"$out/gpus.txt" 2>&1

IFS=, read -ra variants <<<"${VARIANTS:-cuda+vulkan 90,cuda 80}"
for variant in "${variants[@]}"; do
    read -r recipe sm <<<"$variant"
    tag=$recipe-sm$sm
    start=$(date +%s)
    bm build "$recipe" --sm "$sm" -D GGML_CUDA_FA=OFF -j 32 --json >"$out/build-$tag.json" 2>"$out/build-$tag.txt"
    echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build-$tag.txt"
    id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['id'])" "$out/build-$tag.json")
    prefix=$(bm which "$id")
    for lib in "$prefix"/lib/libggml-cuda.so*; do
        [ -L "$lib" ] || { cuobjdump --list-elf --list-ptx "$lib" | sed 's/.*\.\(sm_[0-9a-z]*\|compute_[0-9a-z]*\)\..*/\1/' | sort | uniq -c; } >"$out/cuobjdump-$tag.txt" 2>&1
    done
    bm package "$id" -o /tmp/dist --json >"$out/package-$tag.json" 2>&1
    cp "$prefix/buildmgr-receipt.json" "$out/receipt-$tag.json"
    archive=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['archive'])" "$out/package-$tag.json")
    start=$(date +%s)
    XDG_DATA_HOME=/tmp/fresh-$tag/data XDG_CACHE_HOME=/tmp/fresh-$tag/cache \
        bm install-artifact "$archive" --json >"$out/install-$tag.json" 2>"$out/install-$tag.txt"
    echo "install-artifact exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/install-$tag.txt"
    XDG_DATA_HOME=/tmp/fresh-$tag/data XDG_CACHE_HOME=/tmp/fresh-$tag/cache bm list --json >"$out/list-$tag.json" 2>&1
    cp "/tmp/fresh-$tag"/data/buildmgr/builds/*/"$id"/buildmgr-receipt.json "$out/installed-receipt-$tag.json"
done
bm devices --json >"$out/devices.json" 2>"$out/devices.txt"
ls -l /tmp/dist >"$out/dist.txt"
echo "done" >"$out/finished"
