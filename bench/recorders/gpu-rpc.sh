#!/usr/bin/env bash
# Issue #68 on a lent GPU machine: llama.cpp's RPC backend on a real card. Build cuda+rpc --sm 90 (FA kernels off)
# while a dense F16 llama is written (2048 wide, 16 layers: about 1.7 GB), serve CUDA0 with `buildmgr rpc serve` on
# loopback, then:
#   - `devices --rpc`: the card behind the server, through buildmgr; `rpc ping`: the link's round trip and 64 MiB
#     written and read back, through ggml's own client (OUT/ping.json);
#   - llama-bench of the model on CUDA0 in-process and on RPC0 (the same card behind ggml-rpc-server on loopback),
#     prefill and decode at depths 0 and DEPTH, -fa 0, in ROUNDS rounds of one process per arm, alternating
#     (OUT/bench-ARM-ROUND.json), and OUT/summary.txt: each test's median per arm and RPC over in-process;
#   - `check --verify` of `-dev RPC0` with -fa 0, then with -fa auto (OUT/check-fa*.json), and the server's log.
# Knobs: ROUNDS (default 3), DEPTH (default 4096), REPS (llama-bench's -r, default 3). PAYLOAD as
# bench/recorders/gpu-setup.sh describes. Long: start it with setsid nohup and poll OUT/finished.
#
#   setsid nohup bash bench/recorders/gpu-rpc.sh .device/payload /tmp/rpc >/tmp/rpc.log 2>&1 &
set -uo pipefail
payload=${1:?usage: gpu-rpc.sh PAYLOAD OUT}
out=${2:?usage: gpu-rpc.sh PAYLOAD OUT}
rounds=${ROUNDS:-3}
depth=${DEPTH:-4096}
reps=${REPS:-3}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$here/gpu-setup.sh" "$payload"
log() { echo "$(date +%T) $*" >>"$out/progress.txt"; }
nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version --format=csv >"$out/gpus.txt" 2>&1
lscpu >"$out/lscpu.txt" 2>&1
model=/tmp/rpc-dense.gguf

log "build, model beside it"
python3 "$here/../gguf_model.py" "$model" --embd 2048 --ff 5632 --layers 16 --kv-heads 8 --ctx 8192 \
    >"$out/model.log" 2>&1 &
writing=$!
start=$(date +%s)
bm build cuda+rpc --sm 90 -D GGML_CUDA_FA=OFF -j 16 --json >"$out/build.json" 2>"$out/build.txt"
echo "build exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/build.txt"
prefix=$(bm which cuda+rpc)
wait $writing
ls -l "$model" >>"$out/model.log"

log "serve CUDA0"
bm rpc serve cuda+rpc --device CUDA0 --json >"$out/serve.json" 2>"$out/serve.txt" &
serving=$!
for _ in $(seq 240); do
    if [ -s "$out/serve.json" ] || ! kill -0 $serving 2>/dev/null; then break; fi
    sleep 0.5
done
endpoint=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["endpoint"])' <"$out/serve.json" 2>/dev/null)
if [ -z "$endpoint" ]; then  # rpc serve failed (serve.txt says why): the measurement still runs, on the server itself
    log "rpc serve did not report: ggml-rpc-server started by hand"
    kill $serving 2>/dev/null
    endpoint=127.0.0.1:50052
    "$prefix/bin/ggml-rpc-server" --host 127.0.0.1 --port 50052 --device CUDA0 >"$out/server-by-hand.txt" 2>&1 &
    serving=$!
    sleep 10
fi
log "serving at $endpoint"

bm devices --rpc "$endpoint" --json >"$out/devices.json" 2>"$out/devices.txt"
echo "exit $?" >>"$out/devices.txt"
bm rpc ping cuda+rpc "$endpoint" --json >"$out/ping.json" 2>"$out/ping.txt"
echo "exit $?" >>"$out/ping.txt"
for round in $(seq "$rounds"); do
    for arm in local rpc; do
        if [ "$arm" = local ]; then placement=(-dev CUDA0); else placement=(-rpc "$endpoint" -dev RPC0); fi
        log "round $round: $arm"
        start=$(date +%s)
        "$prefix/bin/llama-bench" -m "$model" "${placement[@]}" -ngl 99 -fa 0 -p 512 -n 128 -d "0,$depth" \
            -r "$reps" -o json >"$out/bench-$arm-$round.json" 2>"$out/bench-$arm-$round.txt"
        echo "exit $? wall seconds: $(( $(date +%s) - start ))" >>"$out/bench-$arm-$round.txt"
    done
done

# the placement proven through buildmgr, -fa 0 (this build has no FlashAttention kernels); then -fa left to auto,
# last: the server claims every op for its device, so auto may turn FlashAttention on where the card has no kernel
for fa in 0 auto; do
    flags=(-rpc "$endpoint" -dev RPC0)
    if [ "$fa" = 0 ]; then flags+=(-fa 0); fi
    log "check --verify, -fa $fa"
    bm check cuda+rpc --verify --json -- llama-bench "${flags[@]}" >"$out/check-fa$fa.json" 2>"$out/check-fa$fa.txt"
    echo "exit $?" >>"$out/check-fa$fa.txt"
done

kill -TERM $serving 2>/dev/null
wait $serving
echo "serve exit $?" >>"$out/serve.txt"
server_log=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["log"])' <"$out/serve.json" 2>/dev/null)
if [ -n "$server_log" ]; then cp "$server_log" "$out/server.log"; fi

python3 - "$out" >"$out/summary.txt" 2>&1 <<'EOF'
import json, statistics, sys
from pathlib import Path

out = Path(sys.argv[1])
found = {}
for path in sorted(out.glob("bench-*.json")):
    arm = path.stem.split("-")[1]
    try:
        rows = json.loads(path.read_text())
    except ValueError:
        print(f"{path.name}: no JSON")
        continue
    for row in rows:
        test = f"{'pp' + str(row['n_prompt']) if row['n_prompt'] else 'tg' + str(row['n_gen'])} @ d{row['n_depth']}"
        found.setdefault(test, {}).setdefault(arm, []).append(row["avg_ts"])
print("test              in-process t/s (each process)       RPC0 t/s (each process)             RPC/local")
for test, arms in found.items():
    local, rpc = arms.get("local", []), arms.get("rpc", [])
    ratio = statistics.median(rpc) / statistics.median(local) if local and rpc else float("nan")
    print(f"{test:16}  {' '.join(f'{v:8.1f}' for v in local):34}  {' '.join(f'{v:8.1f}' for v in rpc):34}  {ratio:.3f}")
EOF
log "done"
touch "$out/finished"
