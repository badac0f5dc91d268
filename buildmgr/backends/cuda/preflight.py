"""CUDA's preflight: where nvcc is, cuBLAS beside it, and whether nvcc takes the host compiler (only compiling
something proves that)."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from buildmgr.backend_spec import Host, Report
from buildmgr.backends.cuda import NAME, TOOLKIT_ROOTS
from buildmgr.core import proc
from buildmgr.core.findings import Check

_DEFAULT_BIN = "/usr/local/cuda/bin"
_CUBLAS_LIBRARIES = ("lib64/libcublas.so*", "targets/*/lib/libcublas.so*", "lib/libcublas.so*")
_CUBLAS_HEADERS = ("include/cublas_v2.h", "targets/*/include/cublas_v2.h")


class Toolkit(NamedTuple):
    """The CUDA toolkit found here: nvcc, the root it sits in, cuBLAS and the host compiler nvcc will use."""

    nvcc: str | None
    cublas_libraries: tuple[Path, ...] = ()
    cublas_headers: tuple[Path, ...] = ()
    host_compiler: str | None = None

    @property
    def root(self) -> Path | None:
        return Path(self.nvcc).resolve().parent.parent if self.nvcc else None

    @property
    def inputs(self) -> tuple[str, ...]:
        if self.nvcc is None:
            return ()
        compiler = [self.host_compiler] if self.host_compiler else []
        return (self.nvcc, *compiler, *map(str, self.cublas_libraries + self.cublas_headers))


def find_nvcc(environ: Mapping[str, str]) -> str | None:
    roots = [environ.get(k, "") for k in TOOLKIT_ROOTS]
    return proc.which("nvcc", environ, *(os.path.join(r, "bin") for r in roots if r), _DEFAULT_BIN)


def locate(host: Host) -> Toolkit:
    nvcc = find_nvcc(host.environ)
    if nvcc is None:
        return Toolkit(None)
    root = Path(nvcc).resolve().parent.parent
    libraries = tuple(p for pattern in _CUBLAS_LIBRARIES for p in root.glob(pattern))
    headers = tuple(p for pattern in _CUBLAS_HEADERS for p in root.glob(pattern))
    return Toolkit(nvcc, libraries, headers, host.environ.get("CUDAHOSTCXX") or host.toolchain.cxx.path)


def parse_nvcc_version(text: str) -> str | None:
    match = re.search(r"release (\d+\.\d+)", text)
    return match.group(1) if match else None


def _host_compiler_check(nvcc: str, cxx: str | None, environ: Mapping[str, str]) -> Check:
    """nvcc refuses host compilers newer than it knows: the only proof is compiling something."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.cu"
        probe.write_text("__global__ void k(int *x) { *x = 1; }\n")
        command = [nvcc, "-c", str(probe), "-o", str(Path(tmp) / "probe.o")] + (["-ccbin", cxx] if cxx else [])
        ran = proc.run(command, timeout=120, env=dict(environ))
    text = ran.output
    if ran.ok:
        return Check(NAME, "nvcc host compiler", True, cxx or "default")
    reason = next((ln.strip() for ln in text.splitlines() if "error" in ln.lower()), text.strip()[-200:])
    return Check(
        NAME,
        "nvcc host compiler",
        False,
        reason,
        "install a gcc that this nvcc supports and set CUDAHOSTCXX=/usr/bin/g++-N",
    )


def _cublas_check(found: Toolkit) -> Check:
    """ggml-cuda links cuBLAS; a toolkit without it fails configure with 'CUDA::cublas ... not found'."""
    ok = bool(found.cublas_libraries and found.cublas_headers)
    return Check(
        NAME,
        "cuBLAS",
        ok,
        str(found.cublas_libraries[0].parent) if ok else f"not in {found.root}",
        "buildmgr toolchain add cuda (a whole toolkit, cuBLAS included, from NVIDIA's PyPI wheels), or install "
        "cuBLAS into this one (NVIDIA's libcublas-dev-<version> package)",
    )


def inspect(host: Host, found: Toolkit, deep: bool) -> Report:
    nvcc = found.nvcc
    if nvcc is None:
        return Report(
            (
                Check(
                    NAME,
                    "nvcc",
                    False,
                    "not found",
                    "buildmgr toolchain add cuda (NVIDIA's PyPI wheels), or install the CUDA toolkit "
                    "(apt-get install nvidia-cuda-toolkit, or NVIDIA's cuda-toolkit package) and set CUDA_HOME",
                ),
            )
        )
    text = proc.run([nvcc, "--version"], timeout=60, env=dict(host.environ)).output
    version = parse_nvcc_version(text)
    checks = [
        Check(
            NAME,
            "nvcc",
            version is not None,
            f"{version} at {nvcc}" if version else text[-200:],
            "nvcc --version did not answer; check the CUDA installation",
        )
    ]
    checks.append(_cublas_check(found))
    if deep and version:
        checks.append(_host_compiler_check(nvcc, found.host_compiler, host.environ))
    return Report(tuple(checks), host_defines={"CMAKE_CUDA_COMPILER": nvcc}, versions={"nvcc": version or "?"})
