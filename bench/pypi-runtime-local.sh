#!/usr/bin/env bash
# The run-time half of bench/recorders/gpu-pypi-toolkit.sh on a host without a GPU (docs/real-runs.md): an artifact built with
# `toolchain add cuda`, installed with the system CUDA toolkit hidden under an empty tmpfs (root, in a private mount
# namespace) and no network for pip, where this Python has NVIDIA's runtime wheels installed (the GPU machine's
# image does). ARCHIVE is the artifact (its .sha256 beside it); OUT receives the captures. Without a driver the
# CUDA module cannot load here (libcuda.so.1): ldd shows where everything else resolves.
set -uo pipefail
archive=${1:?usage: pypi-runtime-local.sh ARCHIVE OUT}
out=${2:?usage: pypi-runtime-local.sh ARCHIVE OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# NVIDIA's runtime wheels, installed the way pip installs them (RECORD and all), where this Python finds them
"$python" -m pip install -q --no-deps --target "$work/site" 'nvidia-cuda-runtime==13.0.*' 'nvidia-cublas==13.*'
export PYTHONPATH=$work/site:$here PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_FIND_LINKS='' PIP_RETRIES=1 PIP_TIMEOUT=2
unset CUDA_HOME CUDA_PATH CUDAToolkit_ROOT LD_LIBRARY_PATH
at() { XDG_DATA_HOME=$work/$1/data XDG_CACHE_HOME=$work/$1/cache XDG_CONFIG_HOME=$work/$1/config "${@:2}"; }
hidden() { unshare --mount --propagation private "$python" "$here/tests/mounts.py" "$(
    "$python" -c 'import json, os, sys; print(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ),
        "mounts": {os.path.realpath("/usr/local/cuda"): "1m"}}))' "$@")"; }

at without hidden "$python" -m buildmgr install-artifact "$archive" --json >"$out/install-without.json" 2>"$out/install-without.txt"
echo "exit $?" >>"$out/install-without.txt"
start=$(date +%s.%N)
at with hidden "$python" -m buildmgr toolchain add cuda-runtime==13.0 --json >"$out/runtime-add.json" 2>"$out/runtime-add.txt"
echo "exit $? seconds $(echo "$(date +%s.%N) - $start" | bc)" >>"$out/runtime-add.txt"
at with hidden "$python" -m buildmgr install-artifact "$archive" --json >"$out/install-with.json" 2>"$out/install-with.txt"
echo "exit $?" >>"$out/install-with.txt"
prefix=$(at with "$python" -m buildmgr which "$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$out/install-with.json")")
at with hidden bash -c "readelf -d '$prefix/bin/libggml-cuda.so' | grep -E 'RPATH|NEEDED'; ldd '$prefix/bin/libggml-cuda.so'" >"$out/ldd.txt" 2>&1
