#!/usr/bin/env bash
# The real CUDA+Vulkan run on a lent GPU machine that has no network (docs/real-runs.md shows what it printed).
# PAYLOAD holds what the machine lacks, prepared on a networked host:
#   llama.cpp-trimmed.tar.gz  the synced pinned source (<data>/sources/llama.cpp-<commit>, with its sync
#                             marker) minus models/ docs/ media/ benches/ gguf-py/ tests/, to fit the transfer
#   debs-root/*.deb           Debian 12's libvulkan1 and the glvnd libraries NVIDIA's Vulkan driver needs
#   debs-sdk/*.deb            the next Debian release's libvulkan-dev, spirv-headers, glslc, libshaderc1;
#                             Debian 12's vulkan-tools (vulkaninfo)
#   whl/*.whl                 platformdirs and gguf
set -euo pipefail
payload=${1:?usage: gpu-run.sh PAYLOAD OUT}
out=${2:?usage: gpu-run.sh PAYLOAD OUT}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$payload"/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
for deb in "$payload"/debs-root/*.deb; do dpkg -x "$deb" /; done
ldconfig
mkdir -p /tmp/vk
for deb in "$payload"/debs-sdk/*.deb; do dpkg -x "$deb" /tmp/vk; done
export VULKAN_SDK=/tmp/vk/usr PATH=/tmp/vk/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/vk/usr/lib/x86_64-linux-gnu
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export XDG_DATA_HOME=/tmp/bm/data XDG_CACHE_HOME=/tmp/bm/cache XDG_CONFIG_HOME=/tmp/bm/config
mkdir -p "$XDG_DATA_HOME/buildmgr/sources"
tar xzf "$payload/llama.cpp-trimmed.tar.gz" -C "$XDG_DATA_HOME/buildmgr/sources"

python3 -m buildmgr doctor >"$out/doctor.txt" 2>&1 || true
start=$(date +%s)
python3 -m buildmgr build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF 2>&1 | tee "$out/build.txt"
echo "build wall seconds: $(( $(date +%s) - start ))" | tee -a "$out/build.txt"
prefix=$(python3 -m buildmgr which cuda+vulkan)
cp "$prefix/buildmgr-receipt.json" "$out/receipt.json"
bench="$prefix/bin/llama-bench"
"$bench" --list-devices >"$out/list-devices.txt" 2>&1
CUDA_VISIBLE_DEVICES= "$bench" --list-devices >"$out/list-devices-no-cuda.txt" 2>&1
GGML_VK_VISIBLE_DEVICES= "$bench" --list-devices >"$out/list-devices-no-vulkan.txt" 2>&1
vulkaninfo --summary >"$out/vulkaninfo-summary.txt" 2>/dev/null || true
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv >"$out/nvidia-smi.csv" || true
python3 -m buildmgr devices --json >"$out/devices.json"
python3 -m buildmgr devices 2>&1 | tee "$out/devices.txt"
python3 - <<'PY' 2>&1 | tee -a "$out/devices.txt"
import subprocess, sys, time
for args in (["devices", "--refresh"], ["devices"]):
    runs = []
    for _ in range(3):
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "buildmgr", *args], capture_output=True, check=True)
        runs.append(time.monotonic() - start)
    print(f"buildmgr {' '.join(args)}: " + ", ".join(f"{r:.2f} s" for r in runs))
PY
