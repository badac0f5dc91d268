#!/usr/bin/env bash
# Coverage on a lent H200 machine (issue #47): build cuda+vulkan --sm 90 with -D GGML_CUDA_FA=OFF (the README's fast
# build), write a random-weight F16 llama (bench/gguf_model.py: 4 layers, 2048 wide; coverage needs its shape, not
# its size), then
#   - `check --model` (text and --json) of `llama-cli -dev CUDA0 -fa 1` and of `-dev Vulkan0 -fa 1`, and of both
#     without -fa; `run --check` of the CUDA one (refused);
#   - the raw scheduler log of each coverage run (GGML_SCHED_DEBUG=2 llama-bench -v), kept as parser fixtures;
#   - `bench` of both -fa 1 placements and the CUDA one without -fa, at depths 0 and 1024, two processes each.
# Everything lands in OUT. PAYLOAD: see bench/recorders/gpu-setup.sh. Long: start it with setsid nohup, poll OUT/finished.
#
#   setsid nohup bash bench/recorders/gpu-coverage.sh .device/payload /tmp/cov >/tmp/cov.log 2>&1 &
set -uo pipefail
payload=${1:?usage: gpu-coverage.sh PAYLOAD OUT}
out=${2:?usage: gpu-coverage.sh PAYLOAD OUT}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
log "setup"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
nvidia-smi -L >"$out/host.txt" 2>&1

log "build"
start=$(date +%s)
bm build "${RECIPE:-cuda+vulkan}" --sm 90 -D GGML_CUDA_FA=OFF -j 16 >"$out/build.txt" 2>&1
echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
prefix=$(bm which "${RECIPE:-cuda+vulkan}" 2>>"$out/build.txt")
cp "$prefix/buildmgr-receipt.json" "$out/receipt.json"
bench="$prefix/bin/llama-bench"

log "model"
python3 "$here/../gguf_model.py" /tmp/cov.gguf --embd 2048 --ff 5632 --layers 4 --kv-heads 8 --ctx 8192 >"$out/model.txt" 2>&1
ls -l /tmp/cov.gguf >>"$out/model.txt"

cases=("cuda0-fa:-dev CUDA0 -fa 1" "vk0-fa:-dev Vulkan0 -fa 1" "cuda0:-dev CUDA0" "vk0:-dev Vulkan0")
log "scheduler logs"  # first: the parser's fixtures, seconds each, if the lent time ends early
for case in "${cases[@]}"; do
    name=${case%%:*}
    read -r -a flags <<<"${case#*:}"
    # the log the coverage run reads (the command placement.cover runs)
    GGML_SCHED_DEBUG=2 "$bench" -m /tmp/cov.gguf -p 512 -n 0 -r 1 --no-warmup -v "${flags[@]}" \
        >/dev/null 2>"$out/sched-$name.log"
done
log "check"
for case in "${cases[@]}"; do
    name=${case%%:*}
    read -r -a flags <<<"${case#*:}"
    bm check "${RECIPE:-cuda+vulkan}" --model /tmp/cov.gguf -- llama-cli "${flags[@]}" >"$out/check-$name.txt" 2>&1
    echo "exit $?" >>"$out/check-$name.txt"
    bm check "${RECIPE:-cuda+vulkan}" --model /tmp/cov.gguf --json -- llama-cli "${flags[@]}" >"$out/check-$name.json" 2>>"$out/check-$name.txt"
done
bm run "${RECIPE:-cuda+vulkan}" --check -- llama-cli -m /tmp/cov.gguf -dev CUDA0 -fa 1 -n 1 -p hi >"$out/run-check.txt" 2>&1
echo "exit $?" >>"$out/run-check.txt"
log "devices"
bm devices >"$out/devices.txt" 2>&1

log "bench"
if [ "${COVERAGE_BENCH:-1}" = 0 ]; then log "done (no bench)"; echo "done" >"$out/finished"; exit 0; fi
bm bench -m /tmp/cov.gguf --depth 0,1024 --runs 2 --json \
    'cuda0-fa=cuda+vulkan -dev CUDA0 -fa 1' 'vk0-fa=cuda+vulkan -dev Vulkan0 -fa 1' 'cuda0=cuda+vulkan -dev CUDA0' \
    >"$out/bench.json" 2>"$out/bench.txt"
echo "exit $?" >>"$out/bench.txt"
cp "$XDG_DATA_HOME"/buildmgr/bench/*.jsonl "$out/" 2>/dev/null
log "done"
echo "done" >"$out/finished"
