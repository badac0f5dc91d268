#!/usr/bin/env bash
# Issues #47 and #48 in one lent-machine session, most needed first: the coverage captures (bench/gpu-coverage.sh),
# then bench beside llama-bench by hand (bench/gpu-bench-honest.sh); the second finds the build the first made.
#
#   setsid nohup bash bench/gpu-47-48.sh .device/payload /tmp/g >/tmp/g.log 2>&1 &
#   bash bench/gpu-poll.sh /tmp/g 540 "$OUT"    # in this call and each next one, until OUT/g/finished exists
set -uo pipefail
payload=${1:?usage: gpu-47-48.sh PAYLOAD OUT}
out=${2:?usage: gpu-47-48.sh PAYLOAD OUT}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
# the honest bench runs both -fa 1 placements: the coverage script's own bench would repeat them
COVERAGE_BENCH=0 bash "$here/gpu-coverage.sh" "$payload" "$out/coverage"
bash "$here/gpu-bench-honest.sh" "$payload" "$out/honest"
echo done >"$out/finished"
