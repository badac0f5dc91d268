#!/usr/bin/env bash
# Issues #48 and #49 in one lent-machine session, most needed first: bench beside llama-bench by hand with three
# processes per CONFIG (bench/gpu-bench-honest.sh, which builds cuda+vulkan; about 18 minutes with the build), then
# with TUNE_PARTS on that build `-ngl 8` by hand and by bench at two sampling intervals, three times interleaved,
# and tune beside its grid on the dense model (bench/gpu-tune.sh).
#
#   setsid nohup bash bench/gpu-48-49.sh .device/payload /tmp/g >/tmp/g.log 2>&1 &
#   bash bench/gpu-poll.sh /tmp/g 540 "$OUT"    # in this call and each next one, until OUT/g/finished exists
# Poll with no `carry`: a later call that carries the tree again replaces the directory the job runs from (the job
# went on, but every program it started after that had no working directory).
set -uo pipefail
payload=${1:?usage: gpu-48-49.sh PAYLOAD OUT}
out=${2:?usage: gpu-48-49.sh PAYLOAD OUT}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
RUNS=3 bash "$here/gpu-bench-honest.sh" "$payload" "$out/honest"
# TUNE_PARTS (default none; 2026-12-05: "ngl dense"): gpu-tune.sh's parts on the same build. Its MoE part races
# both names of the card on this build (about 50 candidates): give it a session of its own on a cuda build.
# J_TUNE (default 1): tune on the honest run's 1.7 GB dense model by energy per token, with its server proof (the
# warm-up request before the measured one): a space of a few candidates, about two minutes.
if [ "${J_TUNE:-1}" = 1 ]; then
    (
        source "$here/gpu-setup.sh" "$payload" >/dev/null 2>&1
        mkdir -p "$out/jtune"
        start=$(date +%s)
        bm tune cuda+vulkan -m /tmp/dense.gguf --objective j_per_token -p 128 -r 3 --json \
            >"$out/jtune/tune.json" 2>"$out/jtune/tune.txt"
        echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/jtune/tune.txt"
        cp "$XDG_DATA_HOME"/buildmgr/tune/* "$out/jtune/" 2>/dev/null
    )
fi
if [ -n "${TUNE_PARTS:-}" ]; then
    RECIPE=cuda+vulkan PARTS="$TUNE_PARTS" NGL_ARMS="hand bench-0.1 bench-5" NGL_DEPTHS=0 \
        bash "$here/gpu-tune.sh" "$payload" "$out/tune"
fi
echo done >"$out/finished"
