#!/usr/bin/env bash
# A build made with NVIDIA's PyPI toolkit (`buildmgr toolchain add cuda`), on a lent GPU machine with the system
# CUDA toolkit out of the way (docs/real-runs.md). PAYLOAD holds whl/ (platformdirs, gguf, pyelftools: see
# bench/recorders/gpu-setup.sh) and art/ (the archive of `buildmgr package`, with its .sha256), made on a networked host;
# OUT receives the captures.
#   1. install-artifact into a fresh data dir: what this host lacks for the CUDA backend, and the command that adds it;
#   2. `toolchain add cuda-runtime==RELEASE` from the wheels this host's Python has (no network here);
#   3. install-artifact into another fresh data dir: smoke-run on CUDA0; ldd says where libcudart/libcublas resolve.
set -uo pipefail
payload=${1:?usage: gpu-pypi-toolkit.sh PAYLOAD OUT}
out=${2:?usage: gpu-pypi-toolkit.sh PAYLOAD OUT}
mkdir -p "$out"
# The image registers its toolkit's lib dir with ldconfig, so clearing PATH and LD_LIBRARY_PATH alone leaves
# libcudart.so.13 found: rerun in a private mount namespace with an empty tmpfs over each system toolkit folder
# (the driver in /usr/local/nvidia stays).
if [ -z "${HIDDEN_CUDA:-}" ]; then
    host_facts() {
        nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv
        echo "--- ld.so.conf.d"; cat /etc/ld.so.conf.d/*.conf
        echo "--- ldconfig -p (CUDA runtime, cuBLAS, driver)"; ldconfig -p | grep -E 'libcudart|libcublas|libcuda\.so'
        echo "--- this Python's NVIDIA wheels"; python3 -m pip list 2>/dev/null | grep -i '^nvidia'
        echo "--- PATH=$PATH"; echo "--- LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "--- CUDA_HOME=${CUDA_HOME:-}"
    }
    host_facts >"$out/host.txt" 2>&1
    toolkits=$(for d in /usr/local/cuda*; do realpath "$d"; done | sort -u | paste -sd' ')
    echo "--- hidden: $toolkits" >>"$out/host.txt"
    HIDDEN_CUDA=$toolkits exec unshare --mount --propagation private bash "$0" "$@"
fi
for d in $HIDDEN_CUDA; do mount -t tmpfs -o size=1m tmpfs "$d" || { echo "cannot hide $d" >"$out/hide-failed"; exit 1; }; done
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$payload"/whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
bm() { python3 -m buildmgr "$@"; }
archive=$(ls "$payload"/art/*.tar.gz)
release=${RELEASE:-13.0}

{
    echo "--- inside: ls /usr/local/cuda/"; ls -A /usr/local/cuda/
    echo "--- inside: ldconfig -p (CUDA runtime, cuBLAS)"; ldconfig -p | grep -E 'libcudart|libcublas'
} >>"$out/host.txt" 2>&1

# The system CUDA toolkit out of the way: not on PATH, not on the loader path, no CUDA_HOME.
PATH=$(tr ':' '\n' <<<"$PATH" | grep -v -i cuda | paste -sd:)
LD_LIBRARY_PATH=$(tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}" | grep -v -i cuda | paste -sd:)
export PATH LD_LIBRARY_PATH
unset CUDA_HOME CUDA_PATH CUDAToolkit_ROOT
echo "PATH=$PATH LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >"$out/env.txt"

since() { python3 -c 'import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))' "$1" "$EPOCHREALTIME"; }
rm -rf /tmp/without /tmp/with
at() { XDG_DATA_HOME=/tmp/$1/data XDG_CACHE_HOME=/tmp/$1/cache XDG_CONFIG_HOME=/tmp/$1/config "${@:2}"; }
start=$EPOCHREALTIME
at without bm install-artifact "$archive" --json >"$out/install-without.json" 2>"$out/install-without.txt"
echo "exit $? seconds $(since "$start")" >>"$out/install-without.txt"
loader() { # DATA LABEL: how the installed build's CUDA backend resolves its libraries
    local id prefix lib
    id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$out/install-$2.json") || return
    prefix=$(at "$1" bm which "$id")
    for lib in "$prefix"/bin/libggml-cuda.so "$prefix"/lib/libggml-cuda.so; do
        [ -f "$lib" ] && { echo "== $2: $lib"; readelf -d "$lib" | grep -E 'RPATH|RUNPATH|NEEDED'; ldd "$lib"; } >>"$out/ldd.txt" 2>&1
    done
}
loader without without

start=$EPOCHREALTIME
at with bm toolchain add "cuda-runtime==$release" --json >"$out/runtime-add.json" 2>"$out/runtime-add.txt"
echo "exit $? seconds $(since "$start")" >>"$out/runtime-add.txt"
at with bm toolchain list --json >"$out/runtime-list.json" 2>&1
start=$EPOCHREALTIME
at with bm install-artifact "$archive" --json >"$out/install-with.json" 2>"$out/install-with.txt"
echo "exit $? seconds $(since "$start")" >>"$out/install-with.txt"
loader with with
at with bm devices --json >"$out/devices.json" 2>"$out/devices.txt"
echo "done" >"$out/finished"
