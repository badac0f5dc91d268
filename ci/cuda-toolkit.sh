#!/usr/bin/env bash
# A CUDA toolkit that llama.cpp's ggml-cuda can configure and compile against, for the tests; prints the
# folder to use as CUDA_HOME, or nothing when this machine has no nvcc.
# Toolkits assembled from NVIDIA's PyPI wheels (nvidia-cuda-nvcc, -runtime, -cccl …) lack cuBLAS and the
# driver stub lib/stubs/libcuda.so. Then $2/toolkit is that toolkit hard-linked (system files stay
# untouched), plus the nvidia-cublas wheel of the same CUDA release, plus a link-time libcuda.so stub.
set -euo pipefail
python=${1:?usage: cuda-toolkit.sh PYTHON DEST}
dest=${2:?usage: cuda-toolkit.sh PYTHON DEST}
root=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}")
[ -x "$root/bin/nvcc" ] || exit 0
if [ -f "$root/include/cublas_v2.h" ] && compgen -G "$root/lib*/stubs/libcuda.so" >/dev/null; then
    echo "$root"
    exit 0
fi
release=$("$root/bin/nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
ready="$dest/toolkit/.ready-$release"
if [ ! -f "$ready" ]; then
    rm -rf "$dest"
    mkdir -p "$dest"
    cp -al "$root" "$dest/toolkit" 2>/dev/null || cp -a "$root" "$dest/toolkit"
    if [ ! -f "$root/include/cublas_v2.h" ]; then
        "$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
            "nvidia-cublas==$release.*" -d "$dest/wheel" >&2
        "$python" -m zipfile -e "$dest"/wheel/nvidia_cublas-*.whl "$dest/wheel/unpacked"
        for part in include lib; do
            cp -a "$dest"/wheel/unpacked/nvidia/cu*/"$part"/. "$dest/toolkit/$part/"
        done
        for library in "$dest"/toolkit/lib/libcublas*.so.*; do
            ln -sf "$(basename "$library")" "${library%.so.*}.so"
        done
        rm -rf "$dest/wheel"
    fi
    if ! compgen -G "$root/lib*/stubs/libcuda.so" >/dev/null; then
        # Stands in for NVIDIA's stub at link time only; nothing here runs CUDA code.
        mkdir -p "$dest/toolkit/lib/stubs"
        cc -shared -o "$dest/toolkit/lib/stubs/libcuda.so" -x c /dev/null
    fi
    touch "$ready"
fi
echo "$dest/toolkit"
