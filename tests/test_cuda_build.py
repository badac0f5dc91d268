"""CUDA with a toolkit at CUDA_HOME: arch checks, then configure + File API proof of the cuda and cuda+vulkan
recipes, then real CUDA objects compiled in that build tree. A full ggml-cuda build is too long for
2 cores; the whole build ran on the H200 (docs/real-runs.md).

ci/test.sh sets BUILDMGR_TEST_CUDA_HOME to a toolkit `buildmgr toolchain add cuda==13.0` made of NVIDIA's PyPI
wheels (kept in ~/.cache); without it these tests are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import VULKAN_PROVISIONED, assert_user_error, buildmgr, make_env, make_receipt

from buildmgr.tools.cmake import find_cmake, read_reply

pytestmark = [
    pytest.mark.configure,
    pytest.mark.skipif(not os.environ.get("BUILDMGR_TEST_CUDA_HOME"), reason="run ci/test.sh to provision CUDA"),
]


def cuda_env(root: Path, **extra: str) -> dict[str, str]:
    return make_env(root, CUDA_HOME=os.environ["BUILDMGR_TEST_CUDA_HOME"], **extra)


def cmake_cache(build_dir: Path) -> dict[str, str]:
    return read_reply(build_dir).cache


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cuda")


@pytest.fixture(scope="module")
def configured(root) -> dict:
    result = buildmgr(cuda_env(root), "build", "cuda", "--sm", "75", "--configure-only", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_bad_arch_and_missing_gpu_are_refused_before_configuring(tmp_path):
    env = cuda_env(tmp_path)
    assert_user_error(buildmgr(env, "build", "cuda", "--sm", "50"), "cannot build compute capability 50")
    assert_user_error(buildmgr(env, "build", "cuda", "--sm", "8.6x"), "is not a CUDA compute capability")
    assert_user_error(
        buildmgr(env | {"CUDA_VISIBLE_DEVICES": ""}, "build", "cuda", "--sm", "native"), "no NVIDIA GPU is visible"
    )
    assert not (tmp_path / "data").exists() and not (tmp_path / "cache").exists()


def test_cuda_configures_with_the_backend_proven_and_nothing_published(root, configured):
    assert configured["id"].startswith("cuda-sm75-")
    assert "ggml-cuda" in configured["targets"]
    cache = cmake_cache(Path(configured["build_dir"]))
    assert cache["GGML_CUDA"] == "ON"
    assert cache["CMAKE_CUDA_ARCHITECTURES"] == "75"
    assert cache["CMAKE_CUDA_COMPILER"].startswith(os.environ["BUILDMGR_TEST_CUDA_HOME"])
    assert json.loads(buildmgr(cuda_env(root), "list", "--json").stdout) == {"builds": [], "unreadable": []}


@pytest.mark.compile
@pytest.mark.parametrize("source", ["ggml-cuda.cu", "arange.cu"])
def test_real_cuda_objects_compile_in_that_tree(root, configured, source):
    """ggml-cuda.cu includes cuBLAS and the driver API; each object must carry sm_75 device code."""
    build_dir = Path(configured["build_dir"])
    target = f"ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/{source}.o"
    cmake = find_cmake("3.18")
    assert cmake is not None
    result = subprocess.run(
        [str(cmake.path), "--build", str(build_dir), "--target", target],
        # as buildmgr's own builds do: paths under the root made relative, so this run hits the last one's entry
        env=cuda_env(root) | {"CCACHE_BASEDIR": str(root), "CCACHE_NOHASHDIR": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sections = subprocess.run(
        ["readelf", "-S", str(build_dir / target)], capture_output=True, text=True, check=True
    ).stdout
    assert ".nv_fatbin" in sections


@VULKAN_PROVISIONED
@pytest.mark.network
def test_cuda_plus_vulkan_configures_both_backends(root, vulkan_toolchain):
    env = cuda_env(root, VULKAN_SDK=str(Path(vulkan_toolchain["path"]) / "usr"))
    result = buildmgr(env, "build", "cuda+vulkan", "--sm", "86,75", "--configure-only", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    configured = json.loads(result.stdout)
    assert configured["id"].startswith("cuda+vulkan-sm75_86-")
    assert {"ggml-cuda", "ggml-vulkan"} <= set(configured["targets"])
    cache = cmake_cache(Path(configured["build_dir"]))
    assert (cache["GGML_CUDA"], cache["GGML_VULKAN"]) == ("ON", "ON")
    assert cache["CMAKE_CUDA_ARCHITECTURES"] == "75-real;86"


NO_PROGRAMS = """
import subprocess, sys
def refuse(self, args, *rest, **kwargs):
    raise AssertionError(f"the no-op started {args!r}")
subprocess.Popen.__init__ = refuse
from buildmgr.cli import main
sys.exit(main(["build", "cuda", "--sm", "75", "--json"]))
"""


def test_the_cuda_no_op_starts_no_program(root, configured):
    """Not nvcc --version, not --list-gpu-arch, not the host-compiler probe: remembered from the first preflight."""
    from buildmgr.store import write_receipt

    prefix = Path(configured["prefix"])
    prefix.mkdir(parents=True)
    try:
        write_receipt(prefix, make_receipt(configured["id"]))
        result = subprocess.run(
            [sys.executable, "-c", NO_PROGRAMS], env=cuda_env(root), capture_output=True, text=True, check=False
        )
    finally:
        shutil.rmtree(prefix)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == {
        "id": configured["id"],
        "prefix": str(prefix),
        "up_to_date": True,
        "devices": None,  # never probed: its receipt was written by hand
    }
