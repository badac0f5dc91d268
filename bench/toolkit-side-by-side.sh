#!/usr/bin/env bash
# Cold ggml-cuda compiles (`cuda --sm 75`), NVIDIA's PyPI toolkit (`buildmgr toolchain add cuda==13.0`) side by side
# with this host's system toolkit, in one run (docs/benchmarks.md). The system toolkit here lacks cuBLAS, whose
# headers every ggml-cuda file includes: it is hard-linked into a scratch folder (system files untouched) with the
# nvidia-cublas wheel's include/ and lib/ added and an empty driver stub, as the tests did before #23.
# WORK ($1) holds everything; the remaining arguments are targets (default: four objects of different kinds);
# ROUNDS (default 3) timed rounds. WHOLE=1: the whole ggml-cuda target instead, cold, both trees building at once.
set -euo pipefail
work=${1:?usage: toolkit-side-by-side.sh WORK [TARGET…]}
shift
here=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$here/.venv/bin/python}
system=$(readlink -f "${SYSTEM_CUDA:-/usr/local/cuda}")
mkdir -p "$work"

if [ ! -f "$work/system/include/cublas_v2.h" ]; then
    rm -rf "$work/system" "$work/wheel"
    cp -al "$system" "$work/system"
    release=$("$system/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
    "$python" -m pip download -q --no-deps --only-binary :all: "nvidia-cublas==${release%%.*}.*" -d "$work/wheel"
    "$python" -m zipfile -e "$work"/wheel/nvidia_cublas-*.whl "$work/wheel/unpacked"
    for part in include lib; do cp -a "$work"/wheel/unpacked/nvidia/cu*/"$part"/. "$work/system/$part/"; done
    for library in "$work"/system/lib/libcublas*.so.*; do ln -sf "$(basename "$library")" "${library%.so.*}.so"; done
    # configure wants CUDA::cuda_driver; compiling objects never links it
    mkdir -p "$work/system/lib/stubs" && cc -shared -o "$work/system/lib/stubs/libcuda.so" -x c /dev/null
fi

bm() { XDG_DATA_HOME=$work/$1/data XDG_CACHE_HOME=$work/$1/cache XDG_CONFIG_HOME=$work/$1/config \
    CCACHE_DIR=$work/$1/ccache "${@:2}"; }
bm pypi "$python" -m buildmgr toolchain add cuda==13.0 >/dev/null
bm pypi env -u CUDA_HOME "$python" -m buildmgr build cuda --sm 75 --toolchain cuda-13.0 --configure-only --json \
    >"$work/pypi.json"
bm system env CUDA_HOME="$work/system" "$python" -m buildmgr build cuda --sm 75 --configure-only --json \
    >"$work/system.json"
dir() { "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["build_dir"])' "$1"; }

if [ -n "${WHOLE:-}" ]; then # the whole ggml-cuda target, both trees at once (bench/toolkit_cold_target.py)
    exec "$python" "$here/bench/toolkit_cold_target.py" "$(dir "$work/pypi.json")" "$(dir "$work/system.json")" \
        --json "$work/cold-target.json"
fi
objects=ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir
[ $# -gt 0 ] || set -- "$objects/norm.cu.o" "$objects/ggml-cuda.cu.o" "$objects/mmvq.cu.o" \
    "$objects/template-instances/mmq-instance-q4_0.cu.o"
"$python" "$here/bench/toolkit_side_by_side.py" "$(dir "$work/pypi.json")" "$(dir "$work/system.json")" \
    --rounds "${ROUNDS:-3}" --json "$work/side-by-side.json" "$@"
