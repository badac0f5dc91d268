#!/usr/bin/env bash
# Issue 46's cost check: the build the proof's AMX fix gives (GGML_NATIVE=OFF with this CPU's features, AMX off)
# against the old native build run with --repack 0 (a user's only workaround before the fix), side by side in one
# `buildmgr bench` per weight type: prefill and decode on Q8_0 and Q4_0 models of 1024 wide, 6 layers.
#
#   FIXED=cpu-4406aa05 OLD=cpu-a707a459 bash bench/amx-fix.sh [OUT_DIR]
#
# OLD is the README build of the buildmgr before the kernels proof (c04d15e), in the same data dir: that buildmgr
# published it; this one refuses it (its proof crashes) and keeps it where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/amx-fix}
mkdir -p "$out"
PYTHON=${PYTHON:-.venv/bin/python}
"$PYTHON" - "$out" <<'PY'
import sys
from pathlib import Path
from buildmgr.proof.models import write_kernels_model
for kind in ("Q8_0", "Q4_0"):
    path = Path(sys.argv[1]) / f"{kind}-1024x6.gguf"
    if not path.exists():
        write_kernels_model(path, (kind,), 6, embd=1024, ff=2816)
PY
for kind in Q8_0 Q4_0; do
    "$PYTHON" -m buildmgr bench -m "$out/$kind-1024x6.gguf" --depth 0 -p 512 -n 128 --no-pg --json \
        "fixed=$FIXED" "old=$OLD --repack 0" > "$out/$kind.json"
done
echo "results in $out"
