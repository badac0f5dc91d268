#!/usr/bin/env bash
# Several recorders in one lent-machine session, most needed first: STEPS, in the order given, each into OUT/STEP.
# Replaces gpu-47-48.sh (STEPS "coverage honest") and gpu-48-49.sh (STEPS "honest jtune", plus "tune" where
# TUNE_PARTS was set). A step that fails does not stop the ones after it; OUT/finished marks the end for gpu-poll.sh.
#   coverage  gpu-coverage.sh into OUT/coverage; its own bench is left out (COVERAGE_BENCH=0) when honest is a step
#             too, since the honest run benches both -fa 1 placements;
#   honest    gpu-bench-honest.sh into OUT/honest (builds cuda+vulkan --sm 90, writes /tmp/dense.gguf and
#             /tmp/moe.gguf); RUNS (default 3), HAND_RUNS and DEPTHS pass through;
#   jtune     tune by energy per token (with its server proof) on the honest run's build and 1.7 GB dense model
#             (`tune cuda+vulkan -m /tmp/dense.gguf --objective j_per_token -p 128 -r 3 --json`) into OUT/jtune:
#             about two minutes; needs honest before it;
#   tune      gpu-tune.sh on the same build into OUT/tune: PARTS from TUNE_PARTS (default "ngl dense"), NGL_ARMS
#             (default "hand bench-0.1 bench-5") and NGL_DEPTHS (default 0). Its moe part races both names of the
#             card on a cuda+vulkan build (about 50 candidates): give that a session of its own on a cuda build.
# PAYLOAD as gpu-setup.sh describes (plus whl-plot/ for honest's plot). Long: start it with setsid nohup and poll:
#
#   setsid nohup bash bench/recorders/gpu-session.sh .device/payload /tmp/g coverage honest >/tmp/g.log 2>&1 &
#   bash bench/recorders/gpu-poll.sh /tmp/g 540 "$OUT"   # in this call and each next one, until OUT/g/finished exists
# Poll with no `carry`: a later call that carries the tree again replaces the directory the job runs from (the job
# went on, but every program it started after that had no working directory).
set -uo pipefail
usage="usage: gpu-session.sh PAYLOAD OUT STEP… (steps: coverage honest jtune tune, most needed first)"
payload=${1:?$usage}
out=${2:?$usage}
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
steps=" $* "
seen=" "
for step in "$@"; do
    case $step in
        coverage | honest | tune) ;;
        jtune) [[ $seen == *" honest "* ]] || { echo "jtune needs honest before it (its build and model)" >&2; exit 2; } ;;
        *) echo "unknown step '$step'; $usage" >&2; exit 2 ;;
    esac
    seen+="$step "
done
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }

coverage() {
    local bench=${COVERAGE_BENCH:-1}
    [[ $steps == *" honest "* ]] && bench=0
    COVERAGE_BENCH=$bench bash "$here/gpu-coverage.sh" "$payload" "$out/coverage"
}
honest() {
    RUNS=${RUNS:-3} bash "$here/gpu-bench-honest.sh" "$payload" "$out/honest"
}
jtune() (
    # shellcheck source=SCRIPTDIR/gpu-setup.sh
    source "$here/gpu-setup.sh" "$payload" >/dev/null 2>&1
    mkdir -p "$out/jtune"
    start=$(date +%s)
    bm tune cuda+vulkan -m /tmp/dense.gguf --objective j_per_token -p 128 -r 3 --json \
        >"$out/jtune/tune.json" 2>"$out/jtune/tune.txt"
    echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/jtune/tune.txt"
    cp "$XDG_DATA_HOME"/buildmgr/tune/* "$out/jtune/" 2>/dev/null
)
tune() {
    RECIPE=cuda+vulkan PARTS="${TUNE_PARTS:-ngl dense}" NGL_ARMS="${NGL_ARMS:-hand bench-0.1 bench-5}" \
        NGL_DEPTHS="${NGL_DEPTHS:-0}" bash "$here/gpu-tune.sh" "$payload" "$out/tune"
}

for step in "$@"; do
    log "$step"
    "$step"
    log "$step exit $?"
done
echo "done" >"$out/finished"
