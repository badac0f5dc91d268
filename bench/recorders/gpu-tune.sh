#!/usr/bin/env bash
# Issue #49 on a lent H200: tune beside the exhaustive grid of the same space, and llama.cpp's own fit by hand; then
# issue #48's open question, why bench read `-ngl 8` slower than llama-bench by hand.
# Build cuda --sm 90 (FA kernels off, the README's fast build: tune's -fa 1 candidates are pruned by coverage) while
# random-weight models are written: a dense F16 llama (about 6 GB) and a MoE larger than its emulated card (64 experts,
# 8 used, MOE_LAYERS layers of 805 MB of experts each), then for each (the dense one first: its grid is small), at
# depth 0 with short tests (WORKLOAD, default -p 128 -n 16 -r 3: where the CPU computes the experts a grid at bench's
# default shape took 31 min on an H100, docs/real-runs.md):
#   - `tune --grid` (every candidate bench's own runs: the grid), then llama-fit-params by hand at the emulated
#     card's margin and the grid's context (what --fit gives a user), then `tune` (the race), tune --json;
#   - OUT/compare.txt: tune's winner against the grid's best, the device time of each, the winner over fit.
# Then `-ngl 8` of a 1.7 GB dense model, five arms interleaved three times: llama-bench by hand, by hand with bench's
# `--progress -v`, bench at engine intervals of 0.1, 1 and 5 s (OUT/ngl-*.json*, ngl.txt, with bench's own CPU time).
# Part jtune: tune by energy per token (with its server proof) on the 1.7 GB dense model at tune's energy default -n 320, so
# each process's joules read from the card's counter (OUT/jtune-*; the progress lines say what each stands on;
# OUT/jtune-*-counter.txt: bench/counter_reads.py on its samples).
# Knobs: RECIPE (default cuda; a build of it already on the machine is reused), PARTS (default "dense moe ngl"; also
# jtune), TUNES (default 1: how many times tune and tune by energy run, each to files of their own: -tune2, …),
# NGL_ARMS (default "hand verbose bench-0.1 bench-1 bench-5"), NGL_DEPTHS (default 0,1024), MOE_LAYERS, MOE_CARD,
# WORKLOAD. PAYLOAD as bench/recorders/gpu-setup.sh describes. Long: start it with setsid nohup and poll OUT/finished.
#
#   setsid nohup bash bench/recorders/gpu-tune.sh .device/payload /tmp/tune >/tmp/tune.log 2>&1 &
set -uo pipefail
payload=${1:?usage: gpu-tune.sh PAYLOAD OUT}
out=${2:?usage: gpu-tune.sh PAYLOAD OUT}
recipe=${RECIPE:-cuda}  # a build of it already made on this machine is reused (gpu-session.sh's tune step)
parts=${PARTS:-dense moe ngl}  # which of the three parts run, in this order
moe_layers=${MOE_LAYERS:-10}
moe_card=${MOE_CARD:-6GiB}
tunes=${TUNES:-1}
read -r -a workload <<<"${WORKLOAD:--p 128 -n 16 -r 3}"
read -r -a ngl_arms <<<"${NGL_ARMS:-hand verbose bench-0.1 bench-1 bench-5}"
ngl_depths=${NGL_DEPTHS:-0,1024}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
has() { [[ " $parts " == *" $1 "* ]]; }
nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version --format=csv >"$out/gpus.txt" 2>&1
lscpu >"$out/lscpu.txt" 2>&1

log "build, models beside it"
(
    if has moe; then
        python3 "$here/../gguf_model.py" /tmp/tune-moe.gguf --embd 2048 --ff 1024 --layers "$moe_layers" --kv-heads 4 \
            --experts 64 --used 8 --ctx 8192
    fi
    if has dense; then
        python3 "$here/../gguf_model.py" /tmp/tune-dense.gguf --embd 4096 --ff 11008 --layers 16 --kv-heads 8 --ctx 8192
    fi
    if has ngl || has jtune; then
        python3 "$here/../gguf_model.py" /tmp/small.gguf --embd 2048 --ff 5632 --layers 16 --kv-heads 8 --ctx 8192
    fi
) >"$out/models.log" 2>&1 &
models=$!
start=$(date +%s)
if ! prefix=$(bm which "$recipe" 2>/dev/null); then
    bm build "$recipe" --sm 90 -D GGML_CUDA_FA=OFF -j 16 --json >"$out/build.json" 2>"$out/build.txt"
    echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
    prefix=$(bm which "$recipe")
fi
wait $models
ls -l /tmp/*.gguf >"$out/models.txt"

for pair in "dense:24GiB" "moe:$moe_card"; do
    model=${pair%%:*} card=${pair#*:}
    has "$model" || continue
    common=(-m "/tmp/tune-$model.gguf" --memory "CUDA0=$card" "${workload[@]}" --json)
    log "$model: grid"
    start=$(date +%s)
    bm tune "$recipe" "${common[@]}" --grid --no-serve --budget 60 >"$out/$model-grid.json" 2>"$out/$model-grid.txt"
    echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/$model-grid.txt"
    # by hand at the context tune serves (its plan's ctx): the fit's overrides move with the context
    log "$model: fit by hand (CUDA0=$card)"
    ctx=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["ctx"])' <"$out/$model-grid.json")
    free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
    want=$(python3 -c "import sys; from buildmgr.tune.config import parse_size; print(parse_size(sys.argv[1], 'x'))" "$card")
    "$prefix/bin/llama-fit-params" -m "/tmp/tune-$model.gguf" -c "$ctx" -fitt $(( free - want + 1024 )) \
        >"$out/$model-fit.txt" 2>"$out/$model-fit.log"
    for n in $(seq "$tunes"); do
        name=$model-tune$([[ $n == 1 ]] || echo "$n")
        log "$model: tune ($n of $tunes)"
        start=$(date +%s)
        bm tune "$recipe" "${common[@]}" >"$out/$name.json" 2>"$out/$name.txt"
        echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/$name.txt"
        python3 "$here/../tune_vs_grid.py" "$out/$model-grid.json" "$out/$name.json" >>"$out/compare.txt" 2>&1
    done
    cp "$XDG_DATA_HOME"/buildmgr/tune/* "$out/" 2>/dev/null
done

if has jtune; then
    for n in $(seq "$tunes"); do
        name=jtune-tune$([[ $n == 1 ]] || echo "$n")
        log "jtune: tune by energy per token ($n of $tunes)"
        start=$(date +%s)
        bm tune "$recipe" -m /tmp/small.gguf --objective j_per_token -p 128 -r 3 --json >"$out/$name.json" \
            2>"$out/$name.txt"
        echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/$name.txt"
        # the counter's reads: how many, what each call took, its update period
        python3 "$here/../counter_reads.py" "$(python3 -c 'import json, sys; print(json.load(sys.stdin)["samples"])' \
            <"$out/$name.json")" >"$out/$name-counter.txt" 2>&1
    done
    cp "$XDG_DATA_HOME"/buildmgr/tune/* "$out/" 2>/dev/null
fi

if has ngl; then
log "ngl8: arms ${ngl_arms[*]}, three times"
ngl=(-dev CUDA0 -ngl 8)
for round in 1 2 3; do
    for arm in "${ngl_arms[@]}"; do
        case $arm in
            hand) "$prefix/bin/llama-bench" -m /tmp/small.gguf -p 512 -n 32 -d "$ngl_depths" -r 5 -o jsonl "${ngl[@]}" \
                    >"$out/ngl-hand-$round.jsonl" 2>/dev/null ;;
            verbose) "$prefix/bin/llama-bench" -m /tmp/small.gguf -p 512 -n 32 -d "$ngl_depths" -r 5 -o jsonl \
                    "${ngl[@]}" --progress -v >"$out/ngl-verbose-$round.jsonl" 2>"$out/ngl-verbose-$round.log" ;;
            bench-*) bm bench -m /tmp/small.gguf --depth "$ngl_depths" --no-pg -p 512 -n 32 --runs 1 -r 5 --warmup 0 \
                    --interval "${arm#bench-}" --json "ngl8=$recipe ${ngl[*]}" >"$out/ngl-$arm-$round.json" \
                    2>"$out/ngl-$arm-$round.txt" ;;
        esac
    done
    log "ngl8 round $round"
done
python3 - "$out" >"$out/ngl.txt" 2>&1 <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
def steady(samples, tokens):
    return statistics.median(tokens * 1e9 / ns for ns in samples[1:])
for rnd in (1, 2, 3):
    for arm in ("hand", "verbose", "bench-0.1", "bench-1", "bench-5"):
        if arm.startswith("bench"):
            f = out / f"ngl-{arm}-{rnd}.json"
            rows = json.loads(f.read_text())["rows"] if f.exists() and f.stat().st_size else []
        else:
            f = out / f"ngl-{arm}-{rnd}.jsonl"
            rows = [json.loads(l) for l in f.read_text().splitlines() if l.startswith("{")] if f.exists() else []
        cells = [f"{r['n_prompt']}/{r['n_gen']}@{r['n_depth']}: {steady(r['samples_ns'], r['n_prompt'] + r['n_gen']):.1f}"
                 for r in rows if r.get("samples_ns")]
        own = [t.get("observer_cpu_s") for t in rows[0]["buildmgr"]["timing"]] if arm.startswith("bench") and rows else []
        print(f"round {rnd} {arm:10} " + "  ".join(cells) + (f"  (bench's own CPU s: {own})" if own else ""))
PY
mkdir -p "$out/samples"
cp "$XDG_DATA_HOME"/buildmgr/bench/*.samples.jsonl.gz "$out/samples/" 2>/dev/null
python3 - "$out/samples" >>"$out/ngl.txt" 2>&1 <<'PY'
import gzip, json, statistics, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("*.samples.jsonl.gz")):
    for line in gzip.open(path, "rt"):
        run = json.loads(line)
        took = [s["read_ms"] for s in run["samples"] if s.get("read_ms") is not None]
        if took:
            print(f"{path.name} {run['config']} round {run['round']}: {len(took)} samples, read_ms median "
                  f"{statistics.median(took):.2f}, max {max(took):.2f}")
PY
fi
log "done"
echo "done" >"$out/finished"
