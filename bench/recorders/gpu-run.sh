#!/usr/bin/env bash
# The real CUDA+Vulkan run on a lent GPU machine that has no network (docs/real-runs.md shows what it printed).
# PAYLOAD: see bench/recorders/gpu-setup.sh.
set -euo pipefail
payload=${1:?usage: gpu-run.sh PAYLOAD OUT}
out=${2:?usage: gpu-run.sh PAYLOAD OUT}
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"

python3 -m buildmgr doctor >"$out/doctor.txt" 2>&1 || true
start=$(date +%s)
python3 -m buildmgr build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF 2>&1 | tee "$out/build.txt"
echo "build wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/build.txt"
prefix=$(python3 -m buildmgr which cuda+vulkan)
cp "$prefix/buildmgr-receipt.json" "$out/receipt.json"
bench="$prefix/bin/llama-bench"
"$bench" --list-devices >"$out/list-devices.txt" 2>&1
CUDA_VISIBLE_DEVICES='' "$bench" --list-devices >"$out/list-devices-no-cuda.txt" 2>&1
GGML_VK_VISIBLE_DEVICES='' "$bench" --list-devices >"$out/list-devices-no-vulkan.txt" 2>&1
vulkaninfo --summary >"$out/vulkaninfo-summary.txt" 2>/dev/null || true
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv >"$out/nvidia-smi.csv" || true
python3 -m buildmgr devices --json >"$out/devices.json"
python3 -m buildmgr devices 2>&1 | tee "$out/devices.txt"
python3 "$(dirname "$0")/../devices_timing.py" 2>&1 | tee -a "$out/devices.txt"
