#!/usr/bin/env bash
# Issue #33 on a lent machine: `buildmgr bench` of the multi-GPU splits. On two cards (nvidia-h200-x2) they are real;
# on one card GGML_CUDA_DEVICES=2 makes ggml-cuda emulate two CUDA devices on it, and the rows are named for that.
# Builds cuda+vulkan --sm 90 (FlashAttention kernels off) unless BUILD names one already built, writes a dense
# random-weight F16 model (bench/gguf_model.py, about 2 GB), asks `check --verify` about each split mode, then one
# bench call over: one device, -sm layer, -sm layer -ts 3,1, -sm row, -sm tensor, and the cross-backend pair (two
# backends on two cards, or one card under its CUDA and Vulkan names). PAYLOAD as bench/recorders/gpu-setup.sh makes it;
# OUT receives everything. Long: start it with setsid nohup and poll OUT/finished.
set -uo pipefail
payload=${1:?usage: gpu-splits.sh PAYLOAD OUT [BUILD]}
out=${2:?usage: gpu-splits.sh PAYLOAD OUT [BUILD]}
build=${3:-}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
nvidia-smi -L >"$out/gpus.txt" 2>&1
if [ "$(grep -c '^GPU ' "$out/gpus.txt")" -lt 2 ]; then
    export GGML_CUDA_DEVICES=2  # two virtual CUDA devices on the one card
    cross=Vulkan0               # the same card under its other backend's name
else
    cross=Vulkan1  # the second card through Vulkan (the placement check says so if it is CUDA0's card)
fi
echo "GGML_CUDA_DEVICES=${GGML_CUDA_DEVICES:-} cross=$cross" >>"$out/gpus.txt"
log "model"
python3 "$here/../gguf_model.py" /tmp/splits.gguf --embd 2048 --ff 5632 --layers 20 --kv-heads 8 --ctx 8192
ls -l /tmp/splits.gguf >"$out/model.txt"
if [ -z "$build" ]; then
    log "build"
    start=$(date +%s)
    bm build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 16 >"$out/build.txt" 2>&1
    echo "exit $? seconds $(( $(date +%s) - start ))" >>"$out/build.txt"
    build=cuda+vulkan
fi
bm devices >"$out/devices.txt" 2>&1
log "check"
for split in "-sm layer" "-sm layer -ts 3,1" "-sm row" "-sm tensor"; do
    # shellcheck disable=SC2086
    {
        echo "\$ buildmgr check $build --verify --json -- llama-cli -dev CUDA0,CUDA1 $split"
        bm check "$build" --verify --json -- llama-cli -dev CUDA0,CUDA1 $split 2>&1
        echo "exit $?"
    } >>"$out/check.txt"
done
{
    echo "\$ buildmgr check $build --verify --json -- llama-cli -dev CUDA0,$cross -sm layer"
    bm check "$build" --verify --json -- llama-cli -dev "CUDA0,$cross" -sm layer 2>&1
    echo "exit $?"
} >>"$out/check.txt"
log "bench"
start=$(date +%s)
bm bench -m /tmp/splits.gguf --depth 0,4096 --runs "${REPS:-3}" --json \
    "one=$build -dev CUDA0" \
    "layer=$build -dev CUDA0,CUDA1 -sm layer" \
    "ts31=$build -dev CUDA0,CUDA1 -sm layer -ts 3,1" \
    "row=$build -dev CUDA0,CUDA1 -sm row" \
    "tensor=$build -dev CUDA0,CUDA1 -sm tensor" \
    "cross=$build -dev CUDA0,$cross -sm layer" \
    >"$out/bench.json" 2>"$out/bench.txt"
echo "exit $? seconds $(( $(date +%s) - start ))" >>"$out/bench.txt"
tar czf "$out/bench-dir.tar.gz" -C "$XDG_DATA_HOME/buildmgr" bench 2>/dev/null  # names with odd characters do not come back
log "done"
echo "done" >"$out/finished"
