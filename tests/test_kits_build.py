"""`buildmgr toolchain add cuda==13.0` for real (NVIDIA's wheels through this machine's pip), with the system CUDA
toolkit hidden under an empty mount: the layout CMake accepts, a configure that picks the toolchain by itself, a .cu
file of ggml-cuda compiled with its nvcc, a driver stub that links executables, a full disk and a release pip cannot
find. The full build with such a toolchain ran on an H200 (docs/real-runs.md).

Needs root (for the mounts) and pip's index; ci/test.sh runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mounts
import pytest
from conftest import buildmgr, make_env

from buildmgr.tools.cmake import find_cmake, read_reply

pytestmark = [
    pytest.mark.network,  # NVIDIA's wheels through pip
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="the mounts need root and unshare"),
]
SYSTEM_CUDA = [p for p in ("/usr/local/cuda", "/usr/local/cuda-13.0", "/usr/local/cuda-12") if os.path.isdir(p)]


def hidden(env: dict[str, str], *args: str, more: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """buildmgr with every system CUDA toolkit folder under an empty tmpfs, and no CUDA variable set."""
    env = {k: v for k, v in env.items() if k not in ("CUDA_HOME", "CUDA_PATH", "CUDAToolkit_ROOT")}
    hide = {os.path.realpath(p): "1m" for p in SYSTEM_CUDA} | (more or {})
    argv = mounts.command([sys.executable, "-m", "buildmgr", *args], env, hide)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3000, check=False)


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kits")


@pytest.fixture(scope="module")
def added(root) -> dict:
    result = hidden(make_env(root), "toolchain", "add", "cuda==13.0", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_the_wheels_are_laid_out_as_a_toolkit_with_a_receipt_of_every_wheel_and_file(root, added):
    kit = Path(added["path"])
    assert (added["id"], added["version"], added["intact"]) == ("cuda-13.0", "13.0", True)
    assert added["packages"]["nvidia-cuda-nvcc"].startswith("13.0.") and "nvidia-cublas" in added["packages"]
    receipt = json.loads((kit / "buildmgr-toolchain.json").read_text())
    assert all(re.fullmatch(r"[0-9a-f]{64}", p["sha256"]) for p in receipt["packages"])  # as pip checked them
    assert receipt["files"]["lib/libcudart.so"] == "link:libcudart.so.13" and receipt["size"] > 500 << 20
    nvcc = subprocess.run([kit / "bin" / "nvcc", "--version"], capture_output=True, text=True, check=True).stdout
    assert "release 13.0" in nvcc
    for library in ("libcudart.so", "libcublas.so", "libcublasLt.so"):
        assert (kit / "lib" / library).resolve().is_file()
    stub = subprocess.run(
        ["readelf", "-d", kit / "lib/stubs/libcuda.so"], capture_output=True, text=True, check=False
    ).stdout
    assert "Library soname: [libcuda.so.1]" in stub
    # asked again: checked against the receipt, not fetched again
    again = hidden(make_env(root), "toolchain", "add", "cuda==13.0", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["already"] is True


@pytest.fixture(scope="module")
def configured(root, added) -> dict:
    result = hidden(make_env(root), "build", "cuda", "--sm", "75", "--configure-only", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "using toolchain cuda-13.0 (buildmgr toolchain add)" in result.stderr
    return json.loads(result.stdout)


@pytest.mark.configure
def test_configure_picks_the_only_toolchain_when_the_host_has_none(added, configured):
    cache = read_reply(Path(configured["build_dir"])).cache
    kit = added["path"]
    assert cache["CMAKE_CUDA_COMPILER"] == f"{kit}/bin/nvcc"
    assert cache["CUDA_cublas_LIBRARY"].startswith(kit) and cache["CUDA_cuda_driver_LIBRARY"].startswith(kit)
    assert cache["CMAKE_INSTALL_RPATH"].endswith(
        ";$ORIGIN/../../../../toolchains/cuda-13.0/lib;$ORIGIN/../../../../toolchains/cuda-runtime-13/lib"
    )


@pytest.mark.configure
def test_with_two_toolchains_for_one_backend_the_build_asks_which(root, added, configured):
    other = Path(added["path"]).parent / "cuda-12.8"
    shutil.copytree(added["path"], other, symlinks=True)
    receipt = json.loads((other / "buildmgr-toolchain.json").read_text()) | {"id": "cuda-12.8", "version": "12.8"}
    (other / "buildmgr-toolchain.json").write_text(json.dumps(receipt))
    try:
        result = hidden(make_env(root), "build", "cuda", "--sm", "75", "--configure-only")
        assert result.returncode == 2
        assert result.stderr.strip().splitlines()[-1] == (
            "buildmgr: error: several added toolchains could build CUDA here (cuda-12.8, cuda-13.0): "
            "pick one with --toolchain NAME"
        )
    finally:
        shutil.rmtree(other)


@pytest.mark.compile
@pytest.mark.configure
def test_a_ggml_cuda_file_compiles_with_the_toolchain_s_nvcc(root, configured):
    build_dir = Path(configured["build_dir"])
    target = "ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/acc.cu.o"
    cmake = find_cmake("3.18")
    assert cmake is not None
    command = [str(cmake.path), "--build", str(build_dir), "--target", target]
    built = subprocess.run(command, env=make_env(root), capture_output=True, text=True, timeout=1800, check=False)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    sections = subprocess.run(["readelf", "-S", build_dir / target], capture_output=True, text=True, check=True)
    assert ".nv_fatbin" in sections.stdout


@pytest.mark.configure
def test_the_driver_stub_links_an_executable_that_uses_every_driver_function_ggml_cuda_names(
    added, configured, tmp_path
):
    """ggml-cuda calls the driver API directly (virtual memory, error strings): a program linked against
    libggml-cuda.so must resolve those at link time. A stub without the symbols links a shared library, never an
    executable, which is what llama-bench is."""
    kit = Path(added["path"])
    header = (kit / "include" / "cuda.h").read_text()
    declared = set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", header))
    used = set()
    source = Path(configured["build_dir"]).parent / "src"
    for path in (source / "ggml" / "src" / "ggml-cuda").rglob("*.cu*"):
        used |= set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", path.read_text(errors="replace"))) & declared
    assert {"cuMemCreate", "cuMemMap", "cuGetErrorString", "cuDeviceGet"} <= used
    program = tmp_path / "uses.c"
    table = ",\n".join(f"(void *){name}" for name in sorted(used))
    program.write_text(
        f"#include <cuda.h>\nvoid *used[] = {{\n{table}\n}};\nint main(void) {{ return used[0] == 0; }}\n"
    )
    library = tmp_path / "libuses.so"
    compile_shared = ["cc", "-shared", "-fPIC", "-I", kit / "include", program, "-o", library]
    subprocess.run(compile_shared, check=True)
    main = tmp_path / "main.c"
    main.write_text("extern void *used[];\nint main(void) { return used[0] == 0; }\n")
    link = ["cc", main, "-o", tmp_path / "main", "-L", tmp_path, "-luses"]
    linked = subprocess.run([*link, "-L", kit / "lib" / "stubs", "-lcuda"], capture_output=True, text=True, check=False)
    assert linked.returncode == 0, linked.stderr
    needed = subprocess.run(
        ["readelf", "-d", tmp_path / "libuses.so"], capture_output=True, text=True, check=False
    ).stdout
    assert "libcuda" not in needed  # the library itself was linked without it, like libggml-cuda's undefined calls
    empty = tmp_path / "empty"
    empty.mkdir()
    subprocess.run(["cc", "-shared", "-o", empty / "libcuda.so", "-x", "c", os.devnull], check=True)
    unresolved = subprocess.run([*link, "-L", empty, "-lcuda"], capture_output=True, text=True, check=False)
    assert unresolved.returncode != 0 and "undefined reference to `cu" in unresolved.stderr


def test_a_full_disk_mid_install_is_one_line_and_leaves_no_half_toolchain(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", data], check=True)
    try:
        result = hidden(make_env(tmp_path), "toolchain", "add", "cuda==13.0")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
        last = result.stderr.strip().splitlines()[-1]
        assert (
            last
            == "buildmgr: error: the disk filled up while pip installed cuda-toolkit[nvcc,cudart,cublas,cccl,crt,nvvm]==13.0.*: free some space; nothing was added"
        )
        toolchains = data / "buildmgr" / "toolchains"
        assert sorted(p.name for p in toolchains.iterdir()) == [".locks", ".staging"] and not any(
            (toolchains / ".staging").iterdir()
        )
        listed = buildmgr(make_env(tmp_path), "toolchain", "list", "--json")
        assert json.loads(listed.stdout) == {"toolchains": [], "unreadable": []}
    finally:
        subprocess.run(["umount", data], check=True)


def test_a_release_pip_cannot_find_lists_the_ones_it_can(tmp_path):
    result = buildmgr(make_env(tmp_path), "toolchain", "add", "cuda==13.99")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    found = re.search(r"pip cannot find cuda-toolkit==13\.99\.\*; the releases it can install: (.*); nothing", last)
    assert found and "13.0" in found.group(1).split(", "), last
    assert not list((tmp_path / "data" / "buildmgr" / "toolchains").glob("cuda-*"))
