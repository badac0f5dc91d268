#!/usr/bin/env bash
# Issue #34 on a lent H200: ggml-cuda's virtual devices (GGML_CUDA_DEVICES=2 emulates two CUDA devices on one card).
# Captures llama-cli --list-devices and the load log of a split over both, ggml's props through buildmgr's probe, and
# what `buildmgr devices --env GGML_CUDA_DEVICES=2`, `check BUILD -- llama-cli -dev CUDA0,CUDA1 -sm layer` and a
# bench of CUDA0 against the split over both say.
# BUILD: a build id or recipe already built (default: cuda+vulkan --sm 90, FlashAttention kernels off, built here).
# PAYLOAD as bench/recorders/gpu-payload.sh makes it.
set -uo pipefail
payload=${1:?usage: gpu-virtual.sh PAYLOAD OUT [BUILD]}
out=${2:?usage: gpu-virtual.sh PAYLOAD OUT [BUILD]}
build=${3:-}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
if [ -z "$build" ]; then
    start=$(date +%s)
    bm build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 16 >"$out/build.txt" 2>&1
    echo "exit $? seconds $(( $(date +%s) - start ))" >>"$out/build.txt"
    build=cuda+vulkan
fi
prefix=$(bm which "$build")
model=$out/tiny.gguf
python3 -c "import sys; from pathlib import Path; from buildmgr.proof.models import write_tiny_model; write_tiny_model(Path(sys.argv[1]))" "$model"
export GGML_CUDA_DEVICES=2
"$prefix/bin/llama-cli" --list-devices >"$out/list-devices-virtual.txt" 2>&1
python3 -m buildmgr.devices.ggml_api "$prefix/lib" >"$out/api-virtual.json" 2>"$out/api-virtual.stderr"
"$prefix/bin/llama-bench" -m "$model" -dev CUDA0/CUDA1 -sm layer -p 16 -n 8 -r 1 >"$out/bench-split-virtual.txt" 2>&1
unset GGML_CUDA_DEVICES
{
    echo '$ buildmgr devices --env GGML_CUDA_DEVICES=2'; bm devices --env GGML_CUDA_DEVICES=2 2>&1
    echo; echo '$ buildmgr devices --env GGML_CUDA_DEVICES=2 --json'; bm devices --env GGML_CUDA_DEVICES=2 --json 2>&1
    echo; echo "\$ GGML_CUDA_DEVICES=2 buildmgr check $build -- llama-cli -dev CUDA0,CUDA1 -sm layer"
    GGML_CUDA_DEVICES=2 bm check "$build" -- llama-cli -dev CUDA0,CUDA1 -sm layer 2>&1; echo "exit $?"
    echo; echo "\$ GGML_CUDA_DEVICES=2 buildmgr check $build --verify --json -- llama-cli -dev CUDA0,CUDA1 -sm layer"
    GGML_CUDA_DEVICES=2 bm check "$build" --verify --json -- llama-cli -dev CUDA0,CUDA1 -sm layer 2>&1; echo "exit $?"
    echo; echo "\$ GGML_CUDA_DEVICES=2 buildmgr bench -m tiny.gguf -p 64 -n 32 --depth 0 --no-pg --runs 3 'one=$build -dev CUDA0' 'split=$build -dev CUDA0,CUDA1 -sm layer'"
    GGML_CUDA_DEVICES=2 bm bench -m "$model" -p 64 -n 32 --depth 0 --no-pg --runs 3 "one=$build -dev CUDA0" \
        "split=$build -dev CUDA0,CUDA1 -sm layer" 2>&1
    echo "exit $?"
} >"$out/buildmgr-virtual.txt"
echo "done" >"$out/finished"
