#!/usr/bin/env bash
# Issue #31 on this machine's CPU: `buildmgr bench`'s wall time against llama-bench by hand for the same kept
# samples, side by side in one run. A random-weight F16 model (bench/gguf_model.py; MODEL, default about 200 MB), the
# cpu build that `buildmgr build` made (BUILDMGR=…, default .venv/bin/buildmgr), one CONFIG at DEPTHS (default 0 and
# 1024), -p 256 -n 64 (WORKLOAD), `--no-pg`, the default --runs 3 -r 6; by hand, llama-bench -r 18 (the same timed
# repetitions, in one process) and -r 15 (the same steady-state ones). ROUNDS rounds (default 3), alternating, so the
# machine's drift falls on both. OUT gets every run's output and times.txt ("name seconds").
set -euo pipefail
out=${1:?usage: cpu-bench-overhead.sh OUT}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
bm=${BUILDMGR:-$here/../.venv/bin/buildmgr}
python=$(dirname "$bm")/python
model=$out/model.gguf
# shellcheck disable=SC2086
"$python" "$here/gguf_model.py" "$model" ${MODEL:---embd 1024 --ff 2816 --layers 8 --kv-heads 8 --vocab 32000 --ctx 2048}
bench=$("$bm" which cpu)/bin/llama-bench
read -r -a workload <<<"${WORKLOAD:--p 256 -n 64}"
depths=${DEPTHS:-0,1024}
stamp() { "$python" -c 'import time; print(f"{time.monotonic():.3f}")'; }
timed() {  # name, command…: the command's wall seconds into times.txt
    local name=$1 t0 t1
    shift
    t0=$(stamp)
    "$@" >"$out/$name.out" 2>"$out/$name.err"
    t1=$(stamp)
    echo "$name $("$python" -c "print(round($t1 - $t0, 3))")" >>"$out/times.txt"
}
for round in $(seq "${ROUNDS:-3}"); do
    timed "hand-r18-$round" "$bench" -m "$model" "${workload[@]}" -d "$depths" -r 18 -o jsonl
    timed "bench-$round" "$bm" bench -m "$model" "${workload[@]}" --depth "$depths" --no-pg --json 'cpu0=cpu'
    timed "hand-r15-$round" "$bench" -m "$model" "${workload[@]}" -d "$depths" -r 15 -o jsonl
done
cat "$out/times.txt"
