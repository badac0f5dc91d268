#!/usr/bin/env bash
# Issue #32 on this machine: `buildmgr install --from DIR` of the cpu artifact into a fresh data dir, against the
# same steps by hand (copy the archive and its .sha256, `sha256sum -c`, `tar x`, the smoke run: every tool's
# --version, `llama-cli --list-devices`, llama-bench -p 512 -n 8 on the proof's kernels model on the CPU and on each device
# listed), side by side, alternating, ROUNDS rounds (default 5).
# The archive is packaged from the build BUILD names (default cpu, the one `buildmgr build` made; BUILDMGR=…, default
# .venv/bin/buildmgr; PYTHON=…, default the Python beside it).
# BEFORE=COMMAND adds a third arm in the same rounds (e.g. a wrapper running an older tree). OUT gets times.txt
# ("name seconds") and each run's output.
set -euo pipefail
out=${1:?usage: install-from.sh OUT}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
bm=${BUILDMGR:-$here/../.venv/bin/buildmgr}
python=${PYTHON:-$(dirname "$bm")/python}  # PYTHON=…: where the buildmgr command is a wrapper
stamp() { "$python" -c 'import time; print(f"{time.monotonic():.4f}")'; }
# bytecode, as pip writes it when it installs a wheel: an editable install under PYTHONDONTWRITEBYTECODE=1, or wheels
# unpacked with --no-compile, would compile every module again in every run (a folder that is not writable keeps
# what it has; compileall fails on a file of another Python's syntax, which is left as it is)
writable=$("$python" -c 'import os, sys; print(" ".join(p for p in sys.path if os.path.isdir(p) and os.access(p, os.W_OK)))')
# shellcheck disable=SC2086
env -u PYTHONDONTWRITEBYTECODE "$python" -m compileall -q "$here/../buildmgr" $writable >/dev/null || true
"$bm" package "${BUILD:-cpu}" -o "$out/dist" >/dev/null
archive=$(ls "$out"/dist/*.tar.gz)
publisher=(env XDG_CONFIG_HOME="$out/publisher")
"${publisher[@]}" "$bm" key generate ci >"$out/key.txt" 2>&1
key=$(tail -1 "$out/key.txt")
"${publisher[@]}" "$bm" publish "$archive" --to "$out/repo" --sign ci >/dev/null 2>&1
# the proof's models, as a host that built before holds them in <cache>/buildmgr/smoke/ (the kernels model: every
# weight type real models use, which the smoke run benches on each device)
"$python" -c "import sys; from pathlib import Path; from buildmgr.proof import models as m; c = Path(sys.argv[1]); m.tiny_model(c); m.kernels_model(c)" "$out/models"
model=$(ls "$out"/models/smoke/kernels-*.gguf)
bench_args=$("$python" -c 'from buildmgr.proof.smoke import BENCH_ARGS; print(" ".join(BENCH_ARGS))')
blob=$(ls "$out"/repo/blobs/sha256/*/*.tar.gz)
by_hand() {  # ROOT: what a user types: copy, check, unpack, then the smoke run's steps one after another (every
    # tool's --version, the devices the build lists, llama-bench on the CPU and on each of them)
    local root=$1
    mkdir -p "$root"
    cp "$blob" "$blob.sha256" "$root/"
    (cd "$root" && sha256sum -c --quiet "$(basename "$blob").sha256")
    tar xzf "$root/$(basename "$blob")" -C "$root"
    local bin device
    bin=$(ls -d "$root"/llama-*/bin)
    # a fresh host's caches, as each buildmgr run gets (a GPU driver keeps its compiled shaders under them)
    export XDG_CACHE_HOME=$root/cache
    mkdir -p "$XDG_CACHE_HOME"
    for tool in llama-cli llama-server llama-bench llama-completion; do "$bin/$tool" --version >/dev/null 2>&1; done
    for device in none $("$bin/llama-cli" --list-devices 2>/dev/null | sed -n 's/^  \([A-Za-z]*[0-9][0-9]*\): .*/\1/p'); do
        # shellcheck disable=SC2086
        "$bin/llama-bench" -m "$model" $bench_args -dev "$device" >/dev/null 2>&1
    done
}
host() {  # ROOT COMMAND…: buildmgr (BM, default this one) with a fresh host's data, cache and config dirs under ROOT
    local root=$1
    shift
    env XDG_DATA_HOME="$root/data" XDG_CACHE_HOME="$root/cache" XDG_CONFIG_HOME="$root/config" "${BM:-$bm}" "$@"
}
with_buildmgr() {  # ROOT: install --from, with its checks, smoke run and proof (the host trusts the key already)
    host "$1" install --from "$out/repo" >"$1.log" 2>&1
}
fresh_host() {  # ROOT: trusts the key and holds the proof's models, which the hand run is given too
    host "$1" key trust "$key" >/dev/null
    mkdir -p "$1/cache/buildmgr" && cp -r "$out/models/smoke" "$1/cache/buildmgr/"
}
timed() {  # NAME FUNCTION ROOT
    local t0 t1
    t0=$(stamp)
    "$2" "$3"
    t1=$(stamp)
    echo "$1 $("$python" -c "print(round($t1 - $t0, 4))")" >>"$out/times.txt"
}
for round in $(seq "${ROUNDS:-5}"); do
    (timed "hand-$round" by_hand "$out/hand-$round")
    fresh_host "$out/bm-$round"  # outside the timing: once per host, not part of an install
    timed "buildmgr-$round" with_buildmgr "$out/bm-$round"
    # each smoke check's seconds, from the receipt
    "$python" -c 'import json, sys; r = json.load(open(sys.argv[1])); [print(round(c["seconds"], 3), *c["command"][:2], c["command"][-1]) for c in r["installed_from"]["smoke"]["checks"]]' \
        "$(ls "$out/bm-$round"/data/buildmgr/builds/*/*/buildmgr-receipt.json)" >"$out/smoke-$round.txt" 2>&1 || true
    if [ -n "${BEFORE:-}" ]; then  # another buildmgr (a command, e.g. an older tree's), in the same rounds
        BM=$BEFORE fresh_host "$out/before-$round"
        BM=$BEFORE timed "before-$round" with_buildmgr "$out/before-$round"
    fi
done
cat "$out/times.txt"
