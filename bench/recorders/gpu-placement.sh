#!/usr/bin/env bash
# The placement check on a lent two-GPU machine (kind nvidia-h200-x2): every row of the placement table through
# `buildmgr check --verify`, predicted against observed, plus `devices --suggest` proven by a run
# (docs/real-runs.md). PAYLOAD is what bench/recorders/gpu-setup.sh describes; OUT receives the results.
set -uo pipefail
payload=${1:?usage: gpu-placement.sh PAYLOAD OUT}
out=${2:?usage: gpu-placement.sh PAYLOAD OUT}
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
bm() { python3 -m buildmgr "$@"; }

bm build cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF -j 32 >"$out/build.txt" 2>&1 || { tail -30 "$out/build.txt"; exit 1; }
prefix=$(bm which cuda+vulkan)
bm devices --refresh >"$out/devices.txt" 2>&1
python3 "$(dirname "$0")/../devices_timing.py" "$prefix" >"$out/timings.txt" 2>&1

while IFS= read -r flags; do
    # shellcheck disable=SC2086
    bm check cuda+vulkan --verify --json -- llama-cli $flags >"$out/row.json" 2>/dev/null
    python3 - "$flags" "$out/row.json" <<'PY' >>"$out/placement.md"
import json, sys
flags, report = sys.argv[1], json.load(open(sys.argv[2]))
[test] = report["tests"]
errors = [f["rule"] for f in test["findings"] if f["severity"] == "error"]
warnings = [f["rule"] or f["message"][:40] for f in test["findings"] if f["severity"] == "warning"]
predicted = ("fails: " + ", ".join(errors)) if errors else "runs" + (f" (warning: {', '.join(warnings)})" if warnings else "")
verify = test["verify"]
observed = "ran" if verify["result"] == "ran" else f"{verify['result']}: {verify['failure'] or ' / '.join(verify['tail'][-2:])}"
print(f"| `{flags}` | {predicted} | {observed} (exit {verify['exit_code']}) | {verify['agreement']} |")
PY
done <"$(dirname "$0")/placement-rows.txt"

{
    echo '$ buildmgr devices --suggest'; bm devices --suggest 2>&1
    suggestion=$(bm devices --suggest --json | python3 -c 'import json,sys; b=next(iter(json.load(sys.stdin)["builds"].values())); print("-dev", ",".join(b["devices"]), "-ts", ",".join(map(str, b["tensor_split"])))')
    echo "\$ buildmgr check cuda+vulkan --verify -- llama-cli $suggestion"
    # shellcheck disable=SC2086
    bm check cuda+vulkan --verify -- llama-cli $suggestion 2>&1
    model=$(python3 -c 'import sys; from pathlib import Path; from buildmgr.proof.models import tiny_model; print(tiny_model(Path(sys.argv[1])))' "$XDG_CACHE_HOME/buildmgr")
    echo "\$ buildmgr run cuda+vulkan --check -- llama-completion -m tiny.gguf -no-cnv -n 4 -p hi $suggestion"
    # shellcheck disable=SC2086
    bm run cuda+vulkan --check -- llama-completion -m "$model" -no-cnv -n 4 -p hi $suggestion >/tmp/completion.out 2>/tmp/completion.err
    echo "exit $?; $(grep -c 'CUDA0\|CUDA1' /tmp/completion.err) log lines name CUDA0/CUDA1; $(grep -m2 'offloaded\|using device' /tmp/completion.err)"
    echo '$ CUDA_VISIBLE_DEVICES=1 buildmgr check cuda+vulkan -- llama-cli -dev CUDA0,Vulkan1'
    CUDA_VISIBLE_DEVICES=1 bm check cuda+vulkan -- llama-cli -dev CUDA0,Vulkan1 2>&1
    echo '$ buildmgr check cuda+vulkan --model tiny.gguf -- llama-cli -dev CUDA0,CUDA1 -ot ffn=CPU'
    bm check cuda+vulkan --model "$model" --json -- llama-cli -dev CUDA0,CUDA1 -ot ffn=CPU 2>&1 | head -40
    echo '$ buildmgr check cuda+vulkan -- llama-bench -dev CUDA0,CUDA1 -sm layer -ot ffn=CUDA1'
    bm check cuda+vulkan -- llama-bench -dev CUDA0,CUDA1 -sm layer -ot ffn=CUDA1 2>&1
} >"$out/suggest.txt"
echo "done" >"$out/finished.txt"
