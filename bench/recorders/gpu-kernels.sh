#!/usr/bin/env bash
# The kernels proof on a lent H200 machine (no network): build cuda+vulkan --sm 90 (its proof runs the kernels model
# on the CPU and on every device the build sees), keep the build's output, receipt and faults.json, then run
# llama-bench on a larger single-type model of each weight type (F16 BF16 Q8_0 Q4_0 Q4_K Q6_K; 4 layers, 1024 wide,
# ff 2816, written with buildmgr.proof.models.write_kernels_model) on -dev none, CUDA0 and Vulkan0 with llama-bench's
# default flags, and write each run's exit code and pp512/tg32 t/s into OUT/types.tsv. OUT/host.txt says what the
# host is (CPU model and flags, gcc, GPUs). PAYLOAD: see bench/recorders/gpu-setup.sh.
# Long: start it with setsid nohup and poll OUT/finished.
#
#   setsid nohup bash bench/recorders/gpu-kernels.sh .device/payload /tmp/kout >/tmp/kout.log 2>&1 &
set -uo pipefail
payload=${1:?usage: gpu-kernels.sh PAYLOAD OUT}
out=${2:?usage: gpu-kernels.sh PAYLOAD OUT}
mkdir -p "$out/runs" "$out/models"
here=$(cd "$(dirname "$0")" && pwd)
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
log "setup"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"

{
    echo "== lscpu"
    lscpu | grep -i 'model name\|flags'
    echo "== amx flags"
    grep -o -w 'amx[a-z0-9_]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
    echo "== gcc"
    gcc --version | head -1
    echo "== nvidia-smi -L"
    nvidia-smi -L
    echo "== gdb"
    command -v gdb || echo "gdb not found"
    echo "== nproc"
    nproc
} >"$out/host.txt" 2>&1

log "build"
start=$(date +%s)
python3 -m buildmgr build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 16 2>&1 | tee "$out/build.txt"
build_rc=${PIPESTATUS[0]}
echo "build exit $build_rc wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/build.txt"
prefix=$(python3 -m buildmgr which cuda+vulkan 2>>"$out/build.txt")
echo "prefix: $prefix" >>"$out/build.txt"
cp "$prefix/buildmgr-receipt.json" "$out/receipt.json" 2>>"$out/build.txt"
faults=$(find "$XDG_CACHE_HOME" -name faults.json 2>/dev/null | head -1)
if [ -n "$faults" ]; then cp "$faults" "$out/faults.json"; echo "faults.json: $faults" >>"$out/build.txt"; fi
bench="$prefix/bin/llama-bench"
"$bench" --list-devices >"$out/list-devices.txt" 2>&1

log "models"
kinds=(F16 BF16 Q8_0 Q4_0 Q4_K Q6_K)
python3 - "$out/models" "${kinds[@]}" <<'PY'
import sys
from pathlib import Path
from buildmgr.proof.models import write_kernels_model
for kind in sys.argv[2:]:
    write_kernels_model(Path(sys.argv[1]) / f"{kind}.gguf", (kind,), 4, embd=1024, ff=2816)
PY
ls -l "$out/models" >"$out/models.txt"

log "bench"
printf 'device\ttype\texit\tpp512_ts\ttg32_ts\n' >"$out/types.tsv"
for device in none CUDA0 Vulkan0; do
    for kind in "${kinds[@]}"; do
        log "bench $device $kind"
        run="$out/runs/$device-$kind"
        timeout 300 "$bench" -m "$out/models/$kind.gguf" -p 512 -n 32 -r 2 -o json -dev "$device" \
            >"$run.json" 2>"$run.err"
        rc=$?
        speeds=$(python3 - "$run.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
except Exception:
    rows = []
def ts(test):
    for row in rows:
        if (row.get("n_prompt"), row.get("n_gen")) == test:
            return f"{row['avg_ts']:.2f}"
    return "-"
print(f"{ts((512, 0))}\t{ts((0, 32))}")
PY
)
        printf '%s\t%s\t%s\t%s\n' "$device" "$kind" "$rc" "$speeds" >>"$out/types.tsv"
    done
done
rm -rf "$out/models"
log "done"
echo "done" >"$out/finished"
