#!/usr/bin/env bash
# Issue #49 on a lent H200: tune beside the exhaustive grid of the same space, and llama.cpp's own fit by hand.
# Build cuda --sm 90 (FA kernels off, the README's fast build: tune's -fa 1 candidates are pruned by coverage), write
# random-weight models of realistic size, a dense F16 llama (about 7 GB) and a MoE larger than the emulated card
# (about 31 GB, 64 experts, 8 used), then for each, with --memory CUDA0=24GiB:
#   - `tune --grid` (every candidate --max-runs processes: the grid), then `tune` (the race), both --json;
#   - llama-bench -fitt by hand (what --fit gives a user) with -v, to read what the fit chose;
#   - OUT/compare.txt: tune's winner against the grid's best, the device time of each, the winner over fit.
# PAYLOAD as bench/gpu-setup.sh describes. Long: start it with setsid nohup and poll OUT/finished.
#
#   setsid nohup bash bench/gpu-tune.sh .device/payload /tmp/tune >/tmp/tune.log 2>&1 &
set -uo pipefail
payload=${1:?usage: gpu-tune.sh PAYLOAD OUT}
out=${2:?usage: gpu-tune.sh PAYLOAD OUT}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/gpu-setup.sh" "$payload"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv >"$out/gpus.txt" 2>&1

log "build"
start=$(date +%s)
bm build cuda --sm 90 -D GGML_CUDA_FA=OFF -j 16 --json >"$out/build.json" 2>"$out/build.txt"
echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
prefix=$(bm which cuda)

log "models"
python3 "$here/gguf_model.py" /tmp/moe.gguf --embd 2048 --ff 1024 --layers 40 --kv-heads 4 --experts 64 --used 8 --ctx 8192
python3 "$here/gguf_model.py" /tmp/dense.gguf --embd 4096 --ff 11008 --layers 16 --kv-heads 8 --ctx 8192
ls -l /tmp/*.gguf >"$out/models.txt"

for model in moe dense; do
    common=(-m "/tmp/$model.gguf" --memory CUDA0=24GiB --depth 1024 --budget 20 --json)
    log "$model: fit by hand"
    "$prefix/bin/llama-fit-params" -m "/tmp/$model.gguf" -c 1792 -fitt $(( $(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1) - 24576 + 1024 )) \
        >"$out/$model-fit.txt" 2>"$out/$model-fit.log"
    log "$model: grid"
    start=$(date +%s)
    bm tune cuda "${common[@]}" --grid --no-serve >"$out/$model-grid.json" 2>"$out/$model-grid.txt"
    echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/$model-grid.txt"
    log "$model: tune"
    start=$(date +%s)
    bm tune cuda "${common[@]}" >"$out/$model-tune.json" 2>"$out/$model-tune.txt"
    echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/$model-tune.txt"
done

log "compare"
python3 "$here/tune_vs_grid.py" "$out"/moe-grid.json "$out"/moe-tune.json >"$out/compare.txt" 2>&1
python3 "$here/tune_vs_grid.py" "$out"/dense-grid.json "$out"/dense-tune.json >>"$out/compare.txt" 2>&1
cp "$XDG_DATA_HOME"/buildmgr/tune/* "$out/" 2>/dev/null
log "done"
echo done >"$out/finished"
