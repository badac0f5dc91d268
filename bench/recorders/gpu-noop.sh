#!/usr/bin/env bash
# The no-op of a GPU recipe on a lent GPU machine, two checkouts side by side (bench/noop_startup.py): BEFORE
# (e.g. `git archive` of the previous commit's buildmgr/, carried in .device/) and this checkout. The prefix is a
# receipt alone, so nothing is compiled: a no-op only reads it. PAYLOAD as bench/recorders/gpu-setup.sh describes.
set -euo pipefail
payload=${1:?usage: gpu-noop.sh PAYLOAD BEFORE_DIR OUT}
before=${2:?usage: gpu-noop.sh PAYLOAD BEFORE_DIR OUT}
out=${3:?usage: gpu-noop.sh PAYLOAD BEFORE_DIR OUT}
mkdir -p "$out"
# shellcheck source=SCRIPTDIR/gpu-setup.sh
source "$(dirname "$0")/gpu-setup.sh" "$payload"
export BUILDMGR_CCACHE=/tmp/site/bin/ccache
args=(cuda+vulkan --sm 90 -D GGML_CUDA_FA=OFF)
python3 -m buildmgr build "${args[@]}" --configure-only --json >"$out/configured.json"
python3 - "$out/configured.json" <<'PY'
import json, pathlib, sys
from buildmgr.store.receipt import FILE_NAME as RECEIPT, SCHEMA as RECEIPT_SCHEMA
configured = json.loads(pathlib.Path(sys.argv[1]).read_text())
prefix = pathlib.Path(configured["prefix"])
prefix.mkdir(parents=True, exist_ok=True)
(prefix / RECEIPT).write_text(json.dumps({"schema": RECEIPT_SCHEMA, "id": configured["id"]}))
PY
python3 "$(dirname "$0")/../noop_startup.py" "$(realpath "$before"):/tmp/site" "$PWD:/tmp/site" 15 -- "${args[@]}" | tee "$out/noop.txt"
