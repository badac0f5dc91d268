#!/usr/bin/env bash
# Device truth on a lent two-GPU machine (kind nvidia-h200-x2): build cuda+vulkan, probe it through ggml's API,
# pair the names by PCI id under two enumeration environments, and keep every capture (docs/real-runs.md).
# PAYLOAD is what bench/recorders/gpu-setup.sh describes; OUT receives the captures.
set -uo pipefail
payload=${1:?usage: gpu-devices.sh PAYLOAD OUT}
out=${2:?usage: gpu-devices.sh PAYLOAD OUT}
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
bm() { python3 -m buildmgr "$@"; }

{   # what buildmgr's job cap sees on this machine, whose memory grows as it is used
    grep -E 'MemTotal|MemAvailable' /proc/meminfo
    echo "cgroup memory.max: $(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo n/a)"
    blocks=(/sys/devices/system/memory/memory*)
    [ -e "${blocks[0]}" ] || blocks=()
    echo "memory blocks online/all: $(grep -l online /sys/devices/system/memory/memory*/state 2>/dev/null | wc -l)/${#blocks[@]}"
    python3 -c "from buildmgr.core import hostfacts; from buildmgr.building.plan import default_jobs; m = hostfacts.available_mib(); g = None if m is None else m / 1024; n = hostfacts.read().cpus or 1; print(f'available_gib {g} -> default jobs for cuda+vulkan: {default_jobs(n, g, 4.0)} of {n} cores')"
} >"$out/memory.txt" 2>&1

start=$(date +%s)
bm build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 32 >"$out/build.txt" 2>&1
echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
grep -E 'MemTotal|MemAvailable' /proc/meminfo >>"$out/memory.txt"
prefix=$(bm which cuda+vulkan)
bench="$prefix/bin/llama-bench"

capture() {  # $1: file suffix; the environment applies to everything
    "$bench" --list-devices >"$out/list-devices$1.txt" 2>&1
    python3 -m buildmgr.devices.ggml_api "$prefix/lib" >"$out/api$1.json" 2>"$out/api$1.stderr"
}
capture ""
CUDA_VISIBLE_DEVICES=1 GGML_VK_VISIBLE_DEVICES=1 capture "-second-card"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv >"$out/nvidia-smi.csv" 2>&1
vulkaninfo --summary >"$out/vulkaninfo-summary.txt" 2>/dev/null

{
    echo '$ buildmgr devices --refresh'; bm devices --refresh 2>&1
    echo; echo '$ buildmgr devices --env CUDA_VISIBLE_DEVICES=1 --env GGML_VK_VISIBLE_DEVICES=1'
    bm devices --env CUDA_VISIBLE_DEVICES=1 --env GGML_VK_VISIBLE_DEVICES=1 2>&1
    echo; echo '$ CUDA_VISIBLE_DEVICES=1 buildmgr devices   (stored inventory, other environment)'
    CUDA_VISIBLE_DEVICES=1 bm devices 2>&1
} >"$out/devices.txt"
bm devices --json >"$out/devices.json"
bm devices --env CUDA_VISIBLE_DEVICES=1 --env GGML_VK_VISIBLE_DEVICES=1 --json >"$out/devices-second-card.json" 2>/dev/null

python3 "$(dirname "$0")/../devices_timing.py" "$prefix" >"$out/timings.txt"

# Placement flags on the tiny model: what the pinned llama.cpp really does with each (the placement issue's table).
# Rows are in llama-cli/llama-completion syntax (',' between devices). llama-bench reads ',' as "another test"
# and '/' as "these devices together", so each row runs three ways: llama-completion as written, llama-bench
# with '/' (the same placement), and llama-bench as written (what a ',' there really does).
model=$(python3 -c 'import sys; from pathlib import Path; from buildmgr.proof.models import tiny_model; print(tiny_model(Path(sys.argv[1])))' "$XDG_CACHE_HOME/buildmgr")
row() {  # $1: label, rest: command
    local label=$1; shift
    timeout 60 "$@" </dev/null >/tmp/row.out 2>/tmp/row.err
    local code=$?
    printf '### %s: %s\nexit %s\n%s\n%s\n\n' "$label" "${*:2}" "$code" "$(grep -E 'error|abort|failed|invalid|GGML_ASSERT|unsupported|not implemented|skipping' /tmp/row.err /tmp/row.out | tail -n 4)" "$(tail -n 2 /tmp/row.err)" >>"$out/placement.txt"
}
while IFS= read -r flags; do
    read -r -a words <<<"$flags"
    slashed=() previous=""
    for w in "${words[@]}"; do
        case "$previous" in -dev | -ts) slashed+=("${w//,//}") ;; *) slashed+=("$w") ;; esac
        previous=$w
    done
    row completion "$prefix/bin/llama-completion" -m "$model" -no-cnv -n 1 -p hi -ngl 99 "${words[@]}"
    row bench-slash "$bench" -m "$model" -p 16 -n 4 -r 1 "${slashed[@]}"
    [ "${slashed[*]}" = "${words[*]}" ] || row bench-comma "$bench" -m "$model" -p 16 -n 4 -r 1 "${words[@]}"
done <"$(dirname "$0")/placement-rows.txt"
echo "done" >"$out/finished.txt"
