#!/usr/bin/env bash
# `buildmgr bench` (issue #22) on a lent H200 machine: build cuda+vulkan --sm 90, write random-weight models with
# bench/gguf_model.py (a dense one and a mixture-of-experts one), record NVML's raw readings idle and under load
# (tests/fixtures/nvml replays them), prove a busy GPU is refused, then one bench call over every placement this
# machine has and a second one that lets the CPU-override CONFIG pin host memory. PAYLOAD as bench/recorders/gpu-setup.sh
# describes, plus whl-plot/ (matplotlib and its wheels, nvidia-ml-py); OUT receives everything.
# Long: start it with setsid nohup and poll OUT/finished.
set -uo pipefail
payload=${1:?usage: gpu-bench.sh PAYLOAD OUT}
out=${2:?usage: gpu-bench.sh PAYLOAD OUT}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version,power.limit,power.default_limit \
    --format=csv >"$out/gpus.txt" 2>&1

record_nvml() {  # seconds, file: NVML's raw values for every GPU, every 100 ms
    python3 - "$1" "$2" <<'EOF'
import json, sys, time
from buildmgr.backends.cuda.engines import NvmlEngines
engines = NvmlEngines.open()
rows, end = [], time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    rows.append([engines.raw(i) for i in range(len(engines.handles))])
    time.sleep(0.1)
print(json.dumps({"users": engines.users(), "limits": engines.limits(), "readings": rows}), file=open(sys.argv[2], "w"))
engines.close()
EOF
}

log "models"
python3 "$here/../gguf_model.py" /tmp/dense.gguf --embd 2048 --ff 5632 --layers 10 --kv-heads 8 --ctx 8192
python3 "$here/../gguf_model.py" /tmp/moe.gguf --embd 1024 --ff 1024 --layers 12 --kv-heads 4 --experts 16 --used 4 --ctx 8192
ls -l /tmp/dense.gguf /tmp/moe.gguf >"$out/models.txt"
record_nvml 2 "$out/nvml-idle.json"

log "build"
start=$(date +%s)
bm build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 16 --json >"$out/build.json" 2>"$out/build.txt"
echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
bm devices --json >"$out/devices.json" 2>"$out/devices.txt"
bench=$(bm which cuda+vulkan)/bin/llama-bench

log "busy"
"$bench" -m /tmp/dense.gguf -dev CUDA0 -p 512 -n 0 -r 20000 -o jsonl >/dev/null 2>&1 &
busy_pid=$!
sleep 3
record_nvml 3 "$out/nvml-busy.json"
bm bench -m /tmp/dense.gguf 'cuda+vulkan -dev CUDA0' --runs 1 >"$out/busy.txt" 2>&1
echo "exit $?" >>"$out/busy.txt"
kill "$busy_pid"; wait "$busy_pid" 2>/dev/null
sleep 2

common=(--depth '0,4096' --runs "${REPS:-3}")
log "bench 1"
start=$(date +%s)
bm bench -m /tmp/dense.gguf "${common[@]}" --plot "$out/bench.png" --json \
    'cuda0=cuda+vulkan -dev CUDA0' \
    'vulkan0=cuda+vulkan -dev Vulkan0' \
    'cuda0+vulkan0=cuda+vulkan -dev CUDA0,Vulkan0 -sm layer' \
    'moe-gpu=cuda+vulkan -m /tmp/moe.gguf -dev CUDA0' \
    'moe-cpu-experts=cuda+vulkan -m /tmp/moe.gguf -dev CUDA0 -ot exps=CPU' \
    'moe-ngl0=cuda+vulkan -m /tmp/moe.gguf -dev CUDA0 -ngl 0' \
    >"$out/bench.json" 2>"$out/bench.txt"
echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/bench.txt"

# Without mmap (-lm none) the CPU-side weights go into the host buffer type CUDA asks for: page-locked unless
# GGML_CUDA_NO_PINNED is set, which bench sets for a CPU-override CONFIG unless --allow-pinned.
for pinned in "" --allow-pinned; do
    log "bench 2 $pinned"
    name=moe-cpu-experts-no-mmap${pinned:+-pinned}
    bm bench -m /tmp/moe.gguf --depth 0 --runs 2 $pinned --json \
        "$name=cuda+vulkan -dev CUDA0 -ot exps=CPU -lm none" >"$out/bench-$name.json" 2>"$out/bench-$name.txt"
    echo "exit $?" >>"$out/bench-$name.txt"
done
cp "$XDG_DATA_HOME"/buildmgr/bench/*.jsonl "$out/"
for rows in "$out"/*[0-9].jsonl; do bm bench --compare "$rows" >"${rows%.jsonl}.md" 2>&1; done
log "done"
echo "done" >"$out/finished"
