#!/usr/bin/env bash
# The structure step (issue #21) on a lent GPU machine: the artifact run of bench/recorders/gpu-artifacts.sh (build, package,
# install-artifact into a fresh data dir, with this host's GPU checked against each build's GPU code), then what
# reads nvidia-smi's and vulkaninfo's captures and the placement rules: the devices table, a suggested -dev, and
# placement checks proven by a tiny run. PAYLOAD as bench/recorders/gpu-setup.sh describes; OUT receives the captures.
set -uo pipefail
payload=${1:?usage: gpu-structure.sh PAYLOAD OUT}
out=${2:?usage: gpu-structure.sh PAYLOAD OUT}
here=$(dirname "$0")
bash "$here/gpu-artifacts.sh" "$payload" "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
export BUILDMGR_CCACHE=/tmp/site/bin/ccache
bm() { python3 -m buildmgr "$@"; }
bm devices >"$out/devices-table.txt" 2>&1
bm devices --suggest >"$out/suggest.txt" 2>&1
bm doctor --json >"$out/doctor.json" 2>&1
for flags in "-dev CUDA0,Vulkan0 -sm layer" "-dev CUDA0 -sm row" "-dev CUDA0 -sm tensor" "-ot ffn=Vulkan0"; do
    # shellcheck disable=SC2086
    bm check cuda+vulkan --verify --json -- llama-cli $flags >>"$out/check.jsonl" 2>>"$out/check.txt"
    echo "exit $? for $flags" >>"$out/check.txt"
done
echo "done" >"$out/structure-finished"
