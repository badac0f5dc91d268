#!/usr/bin/env bash
# Issue #31 on a lent H200: bench against llama-bench by hand in one call. Build cuda+vulkan --sm 90 (FA kernels
# off), write a random-weight F16 dense model of about 1.9 GB (16 layers, 17 with the output), then, interleaved as a
# user would run them: `buildmgr bench` of CUDA0 and Vulkan0 at depths 0 and 4096 (--no-pg, the default --runs 3
# -r 6), timed, beside llama-bench by hand on the same build, model and flags (-r 5 for the agreement; -r 18, the
# same number of timed repetitions, and -r 15, the same steady-state ones, for the overhead); then -ngl 4 and -ngl 0
# (partial offload and fallback). PAYLOAD as bench/recorders/gpu-setup.sh describes plus whl-plot/ (nvidia-ml-py,
# matplotlib). Long: start it with setsid nohup and poll OUT/finished.
set -uo pipefail
payload=${1:?usage: gpu-bench-steady.sh PAYLOAD OUT}
out=${2:?usage: gpu-bench-steady.sh PAYLOAD OUT}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
stamp() { python3 -c 'import time; print(f"{time.monotonic():.3f}")'; }
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,clocks.max.memory,power.limit --format=csv \
    >"$out/gpus.txt" 2>&1

log "model"
python3 "$here/../gguf_model.py" /tmp/dense.gguf --embd 2048 --ff 5632 --layers 16 --kv-heads 8 --ctx 8192
ls -l /tmp/dense.gguf >"$out/models.txt"

log "build"
start=$(date +%s)
bm build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 16 --json >"$out/build.json" 2>"$out/build.txt"
echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
bench=$(bm which cuda+vulkan)/bin/llama-bench

hand() {  # name, -r, -dev: llama-bench as a user runs it, timed
    local t0 t1
    t0=$(stamp)
    "$bench" -m /tmp/dense.gguf -p 512 -n 128 -d 0,4096 -r "$2" -dev "$3" -o jsonl >"$out/hand-$1.jsonl" 2>"$out/hand-$1.txt"
    t1=$(stamp)
    echo "$1 $2 $3 $(python3 -c "print(round($t1 - $t0, 3))")" >>"$out/times.txt"
}
run_bench() {  # name, CONFIGs…: timed
    local name=$1 t0 t1
    shift
    t0=$(stamp)
    bm bench -m /tmp/dense.gguf --depth 0,4096 --no-pg --json --plot "$out/bench-$name.png" "$@" \
        >"$out/bench-$name.json" 2>"$out/bench-$name.txt"
    echo "exit $?" >>"$out/bench-$name.txt"
    t1=$(stamp)
    echo "bench-$name - - $(python3 -c "print(round($t1 - $t0, 3))")" >>"$out/times.txt"
}
log "side by side"
for round in $(seq "${ROUNDS:-2}"); do  # hand and bench alternate: the machine's drift falls on both
    hand "cuda0-r5-$round" 5 CUDA0
    hand "vk0-r5-$round" 5 Vulkan0
    run_bench "steady-$round" 'cuda0=cuda+vulkan -dev CUDA0' 'vk0=cuda+vulkan -dev Vulkan0'
    hand "cuda0-r18-$round" 18 CUDA0
    hand "vk0-r18-$round" 18 Vulkan0
    if [ -z "${QUICK:-}" ]; then
        hand "cuda0-r15-$round" 15 CUDA0
        hand "vk0-r15-$round" 15 Vulkan0
    fi
    log "round $round"
done
log "partial offload"
bm bench -m /tmp/dense.gguf --depth 0 -p 64 -n 32 --no-pg --runs 2 -r 3 --json \
    'ngl4=cuda+vulkan -dev CUDA0 -ngl 4' 'ngl0=cuda+vulkan -dev CUDA0 -ngl 0' 'all=cuda+vulkan -dev CUDA0' \
    >"$out/bench-partial.json" 2>"$out/bench-partial.txt"
echo "exit $?" >>"$out/bench-partial.txt"
cp "$XDG_DATA_HOME"/buildmgr/bench/* "$out/" 2>/dev/null
cp "$XDG_CACHE_HOME"/buildmgr/bench-host.json "$out/" 2>/dev/null
log "done"
echo "done" >"$out/finished"
