#!/usr/bin/env bash
# Issue #48 on a lent H200: bench of six placements beside llama-bench -r 5 by hand under the same environment, in one
# call. Build cuda+vulkan --sm 90 (FA kernels off: the -fa 1 CONFIGs are partial on CUDA, issue #47), write a
# random-weight F16 dense llama (16 layers, 2048 wide) and a MoE (12 layers, 16 experts, 4 used), then:
#   - `bench` at depths 0 and 1024 (--no-pg, -n 64, --runs RUNS (default 3), -r 4) of CUDA0, Vulkan0, -ngl 8 (partial), -ot on half the layers,
#     -fa 1 on both backends, and on the MoE its experts on the CPU (-ot exps=CPU) beside all on CUDA0;
#   - each of them by hand with llama-bench -r 5 -d 0,1024, HAND_RUNS (3) processes, with the environment bench set
#     for it (its env_set); then cuda0-fa with llama-bench's stderr to a file, a line-at-a-time pipe and a gathering one;
#   - OUT/compare.txt: per test, bench's steady median against the hand run's, the decode rows' limit share and the
#     arithmetic behind it (read_mb, bandwidth), and the verdicts beside the hand runs' order.
# PAYLOAD as bench/recorders/gpu-setup.sh describes plus whl-plot/. Long: start it with setsid nohup and poll OUT/finished.
#
#   setsid nohup bash bench/recorders/gpu-bench-honest.sh .device/payload /tmp/honest >/tmp/honest.log 2>&1 &
set -uo pipefail
payload=${1:?usage: gpu-bench-honest.sh PAYLOAD OUT}
out=${2:?usage: gpu-bench-honest.sh PAYLOAD OUT}
runs=${RUNS:-3}
hand_runs=${HAND_RUNS:-3}  # processes by hand per CONFIG: where the CPU computes, one process is no reference to 5 %
depths=${DEPTHS:-0,1024}  # 0 alone where the lent time is short
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,clocks.max.memory,power.limit --format=csv \
    >"$out/gpus.txt" 2>&1

log "models"
python3 "$here/../gguf_model.py" /tmp/dense.gguf --embd 2048 --ff 5632 --layers 16 --kv-heads 8 --ctx 8192
python3 "$here/../gguf_model.py" /tmp/moe.gguf --embd 1024 --ff 1024 --layers 12 --kv-heads 4 --experts 16 --used 4 --ctx 8192
ls -l /tmp/*.gguf >"$out/models.txt"

log "build"
start=$(date +%s)
bm build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 16 --json >"$out/build.json" 2>"$out/build.txt"
echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
bench=$(bm which cuda+vulkan)/bin/llama-bench

half='blk\.([89]|1[0-5])\.=CPU'
configs=(
    'cuda0=cuda+vulkan -dev CUDA0'
    'vk0=cuda+vulkan -dev Vulkan0'
    'ngl8=cuda+vulkan -dev CUDA0 -ngl 8'
    "ot-half=cuda+vulkan -dev CUDA0 -ot $half"
    'cuda0-fa=cuda+vulkan -dev CUDA0 -fa 1'
    'vk0-fa=cuda+vulkan -dev Vulkan0 -fa 1'
)
log "bench dense"
plot=()  # matplotlib is an extra the image may lack
if python3 -c 'import matplotlib' 2>/dev/null; then plot=(--plot "$out/dense.png"); fi
bm bench -m /tmp/dense.gguf --depth "$depths" --no-pg -n 64 --runs "$runs" -r 4 --json "${plot[@]}" "${configs[@]}" \
    >"$out/bench-dense.json" 2>"$out/bench-dense.txt"
echo "exit $?" >>"$out/bench-dense.txt"

log "by hand"
hand() {  # name, model, env (K=V or -), llama-bench flags…
    local name=$1 model=$2 vars=()
    [ "$3" = - ] || vars=("$3")
    shift 3
    for k in $(seq "$hand_runs"); do
        env "${vars[@]}" "$bench" -m "$model" -p 512 -n 64 -d "$depths" -r 5 -o jsonl "$@" \
            >"$out/hand-$name-$k.jsonl" 2>"$out/hand-$name-$k.txt"
    done
}
hand cuda0 /tmp/dense.gguf - -dev CUDA0
hand vk0 /tmp/dense.gguf - -dev Vulkan0
hand ngl8 /tmp/dense.gguf - -dev CUDA0 -ngl 8
hand ot-half /tmp/dense.gguf GGML_CUDA_NO_PINNED=1 -dev CUDA0 -ot "$half"
hand cuda0-fa /tmp/dense.gguf - -dev CUDA0 -fa 1
hand vk0-fa /tmp/dense.gguf - -dev Vulkan0 -fa 1
# the dense model's part comes whole first: a machine taken back half-way leaves a comparison of it
log "bench moe"
bm bench -m /tmp/moe.gguf --depth "$depths" --no-pg -n 64 --runs "$runs" -r 4 --json \
    'moe-gpu=cuda+vulkan -dev CUDA0' 'moe-cpu-experts=cuda+vulkan -dev CUDA0 -ot exps=CPU' \
    >"$out/bench-moe.json" 2>"$out/bench-moe.txt"
echo "exit $?" >>"$out/bench-moe.txt"
log "moe by hand"
hand moe-gpu /tmp/moe.gguf - -dev CUDA0
hand moe-cpu-experts /tmp/moe.gguf GGML_CUDA_NO_PINNED=1 -dev CUDA0 -ot 'exps=CPU'

log "reader"
# cuda0-fa's decode read 0.79-0.84 of the hand run under bench in three runs: llama-bench -v prints a line per CUDA
# graph replayed (17 a token here). Three rounds of: stderr to a file; to a pipe read a line at a time (bench's
# reader before proc.GATHER_S); to a pipe read as bench reads it now.
reader='import sys, os, time
gather = float(sys.argv[1])
while os.read(0, 1 << 16):
    time.sleep(gather)'
for k in 1 2 3; do
    flags=(-m /tmp/dense.gguf -p 0 -n 64 -d 0 -r 5 -o jsonl -dev CUDA0 -fa 1 --progress -v)
    "$bench" "${flags[@]}" >"$out/reader-file-$k.jsonl" 2>/dev/null
    "$bench" "${flags[@]}" 2>&1 >"$out/reader-line-$k.jsonl" | python3 -c "$reader" 0
    "$bench" "${flags[@]}" 2>&1 >"$out/reader-gather-$k.jsonl" | python3 -c "$reader" 0.005
done
python3 - "$out" >"$out/reader.txt" 2>&1 <<'PY'
import json, statistics, sys
from pathlib import Path
for arm in ("file", "line", "gather"):
    got = []
    for f in sorted(Path(sys.argv[1]).glob(f"reader-{arm}-*.jsonl")):
        got += [statistics.median(r["samples_ts"][1:]) for r in map(json.loads, f.read_text().splitlines()) if r["n_gen"]]
    print(arm, " ".join(f"{g:.1f}" for g in got))
PY

log "compare"
python3 - "$out" >"$out/compare.txt" 2>&1 <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
for name in ("dense", "moe"):
    found = json.loads((out / f"bench-{name}.json").read_text())
    for row in found["rows"]:
        meta = row["buildmgr"]
        key = (row["n_prompt"], row["n_gen"], row["n_depth"])
        per_process = []  # each hand process's steady median, its first repetition left out as bench keeps it apart
        for hand_file in sorted(out.glob(f"hand-{meta['config']}-[0-9]*.jsonl")):  # not cuda0-fa's for cuda0
            hand = [json.loads(l) for l in hand_file.read_text().splitlines() if l.startswith("{")]
            per_process += [statistics.median(h["samples_ts"][1:]) for h in hand
                            if (h["n_prompt"], h["n_gen"], h["n_depth"]) == key]
        steady = statistics.median(row["samples_ts"]) if row["samples_ts"] else None
        hand_ts = statistics.median(per_process) if per_process else None
        spread = f" hand processes {min(per_process):.4g}-{max(per_process):.4g}" if len(per_process) > 1 else ""
        share = f"{steady / hand_ts:.3f}" if steady and hand_ts else "-"
        limit = meta.get("limit") or {}
        print(f"{meta['config']:16} pp{row['n_prompt']} tg{row['n_gen']} d{row['n_depth']}: bench {steady} hand {hand_ts}"
              f" ratio {share} {meta['validity']} limit% {meta.get('limit_percent')} read_mb {limit.get('read_mb')}"
              f" gbs {limit.get('bandwidth_gbs')}{spread}")
    print("\n".join(found["verdicts"]))
PY
cp "$XDG_DATA_HOME"/buildmgr/bench/* "$out/" 2>/dev/null
cp "$XDG_CACHE_HOME"/buildmgr/bench-host.json "$out/" 2>/dev/null
log "done"
echo "done" >"$out/finished"
