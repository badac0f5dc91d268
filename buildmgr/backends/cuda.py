"""CUDA: nvcc, its host compiler, and the compute capabilities it can build.

Arch policy for `--sm`: real machine code (SASS) for every listed capability, and PTX only for
the highest, so newer GPUs can still JIT it: `--sm 86,89` → CMAKE_CUDA_ARCHITECTURES=86-real;89.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import proc
from buildmgr.backends import ArchOption, Check, Host, Memo, Report, one_to_one, stamps, which
from buildmgr.errors import UserError

if TYPE_CHECKING:
    from buildmgr.probe import Device, NvidiaGpu, VulkanGpu

NAME = "CUDA"
GGML_TARGET = "ggml-cuda"
MIN_CMAKE = "3.18"
GIB_PER_JOB = 4.0  # nvcc on ggml-cuda's template instances
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GGML_CUDA_DEVICES")
# Libraries the built files may need from the host (soname stem → where it comes from).
RUNTIME_LIBRARIES = {
    "libcuda.so": "the NVIDIA driver",
    "libcudart.so": "the CUDA runtime: apt cuda-cudart-13-0, or pip nvidia-cuda-runtime (add its lib/ to LD_LIBRARY_PATH)",
    "libcublas.so": "cuBLAS: apt libcublas-13-0, or pip nvidia-cublas (add its lib/ to LD_LIBRARY_PATH)",
    "libcublasLt.so": "cuBLAS: apt libcublas-13-0, or pip nvidia-cublas (add its lib/ to LD_LIBRARY_PATH)",
    "libnccl.so": "NCCL: apt libnccl2, or pip nvidia-nccl",
}
# Where the artifacts workflow can build it, and the provisioning step it needs ("" none).
SYSTEMS = ("linux",)
CI_SETUP = "cuda"
DRIVER_LIBRARY = "libcuda.so.1"
_SM = re.compile(r"^(\d{1,2})\.?(\d)([af]?)$")
# Lowest capability each nvcc major can build, when `nvcc --list-gpu-arch` is not available.
_LOWEST_BY_MAJOR = {11: 35, 12: 50, 13: 75}


def find_nvcc(environ: dict[str, str]) -> str | None:
    roots = [environ.get(k, "") for k in ("CUDA_HOME", "CUDAToolkit_ROOT", "CUDA_PATH")]
    return which("nvcc", *(os.path.join(r, "bin") for r in roots if r), "/usr/local/cuda/bin")


def parse_nvcc_version(text: str) -> str | None:
    match = re.search(r"release (\d+\.\d+)", text)
    return match.group(1) if match else None


def parse_gpu_archs(text: str) -> tuple[int, ...]:
    """`nvcc --list-gpu-arch` output → the numeric capabilities it can target."""
    return tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", text)}))


def parse_sm(text: str, supported: tuple[int, ...], nvcc_version: str) -> tuple[str, str]:
    """`--sm 86,89` → (CMAKE_CUDA_ARCHITECTURES, label for the build id). Raises UserError before any compiling."""
    archs: list[tuple[int, str]] = []
    for item in (part.strip() for part in text.split(",")):
        match = _SM.match(item)
        if not match:
            raise UserError(f"--sm {item!r} is not a CUDA compute capability; use e.g. 86, 8.6, 90a or native")
        number = int(match.group(1) + match.group(2))
        if supported and number not in supported:
            raise UserError(
                f"--sm {item}: nvcc {nvcc_version} cannot build compute capability {number} "
                f"(it builds {supported[0]}–{supported[-1]}); CUDA 13 dropped everything below 75"
            )
        archs.append((number, f"{number}{match.group(3)}"))
    names = [name for _, name in sorted(set(archs))]
    value = ";".join([f"{n}-real" for n in names[:-1]] + names[-1:])
    return value, "sm" + "_".join(names)


def visible_capabilities(environ: dict[str, str]) -> list[str]:
    """Compute capabilities of the GPUs CUDA would see here, e.g. ['9.0']; empty when none is visible."""
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return []
    smi = which("nvidia-smi")
    if smi is None:
        return []
    ran = proc.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], timeout=30)
    return (
        sorted({ln.strip() for ln in ran.output.splitlines() if re.match(r"^\d+\.\d+$", ln.strip())}) if ran.ok else []
    )


def asks_the_gpus(text: str | None) -> bool:
    """No --sm, or --sm native: the answer depends on the GPUs present, not only on files."""
    return text is None or text.strip() == "native"


def resolve_sm(text: str | None, environ: dict[str, str]) -> tuple[str, str]:
    """`--sm` (or its absence, or 'native') → concrete capabilities, so the build id says what was built.

    Upstream's own 'native' fails late on a host without a GPU ("compute_No CUDA devices found").
    """
    nvcc = find_nvcc(environ)
    if nvcc is None:
        raise UserError("--sm needs nvcc: install the CUDA toolkit and set CUDA_HOME")
    version = parse_nvcc_version(proc.run([nvcc, "--version"], timeout=60).output) or "?"
    if asks_the_gpus(text):
        capabilities = visible_capabilities(environ)
        if not capabilities:
            raise UserError(
                "no NVIDIA GPU is visible here to build for natively (nvidia-smi found none); "
                "name the compute capability instead, e.g. --sm 86"
            )
        text = ",".join(capabilities)
    return parse_sm(text, supported_archs(nvcc, version if version != "?" else None), version)


def supported_archs(nvcc: str, version: str | None) -> tuple[int, ...]:
    ran = proc.run([nvcc, "--list-gpu-arch"], timeout=60)
    archs = parse_gpu_archs(ran.output) if ran.ok else ()
    if archs or version is None:
        return archs
    return archs_of_major(int(version.split(".")[0]))


def archs_of_major(major: int) -> tuple[int, ...]:
    """The capabilities a CUDA toolkit of this major version can build (from the lowest it keeps)."""
    lowest = _LOWEST_BY_MAJOR.get(major, 0)
    return tuple(n for n in range(lowest, 130) if n % 10 in (0, 2, 3, 5, 6, 7, 9))


def _host_compiler_check(nvcc: str, cxx: str | None) -> Check:
    """nvcc refuses host compilers newer than it knows: the only proof is compiling something."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.cu"
        probe.write_text("__global__ void k(int *x) { *x = 1; }\n")
        command = [nvcc, "-c", str(probe), "-o", str(Path(tmp) / "probe.o")] + (["-ccbin", cxx] if cxx else [])
        ran = proc.run(command, timeout=120)
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


def _cublas_files(toolkit: Path) -> tuple[list[Path], list[Path]]:
    libraries = [
        p
        for pattern in ("lib64/libcublas.so*", "targets/*/lib/libcublas.so*", "lib/libcublas.so*")
        for p in toolkit.glob(pattern)
    ]
    headers = [p for pattern in ("include/cublas_v2.h", "targets/*/include/cublas_v2.h") for p in toolkit.glob(pattern)]
    return libraries, headers


def _host_compiler(host: Host) -> str | None:
    return host.environ.get("CUDAHOSTCXX") or host.toolchain.cxx.path


def inputs(host: Host) -> tuple[str, ...]:
    """The files behind what inspect() and resolve_sm() find: nvcc, its host compiler and cuBLAS."""
    nvcc = find_nvcc(host.environ)
    if nvcc is None:
        return ()
    libraries, headers = _cublas_files(Path(nvcc).resolve().parent.parent)
    compiler = _host_compiler(host)
    return (nvcc, *([compiler] if compiler else []), *map(str, libraries + headers))


def _cublas_check(toolkit: Path) -> Check:
    """ggml-cuda links cuBLAS; a toolkit without it fails configure with 'CUDA::cublas ... not found'."""
    libraries, headers = _cublas_files(toolkit)
    ok = bool(libraries and headers)
    return Check(
        NAME,
        "cuBLAS",
        ok,
        str(libraries[0].parent) if ok else f"not in {toolkit}",
        "install cuBLAS into the CUDA toolkit (NVIDIA's libcublas-dev-<version> or cuda-toolkit package; "
        "for a toolkit made of NVIDIA's PyPI wheels, copy the nvidia-cublas wheel's include/ and lib/ into it)",
    )


def inspect(host: Host, deep: bool) -> Report:
    nvcc = find_nvcc(host.environ)
    if nvcc is None:
        return Report(
            (
                Check(
                    NAME,
                    "nvcc",
                    False,
                    "not found",
                    "install the CUDA toolkit (apt-get install nvidia-cuda-toolkit, or NVIDIA's "
                    "cuda-toolkit package) and set CUDA_HOME",
                ),
            )
        )
    text = proc.run([nvcc, "--version"], timeout=60).output
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
    checks.append(_cublas_check(Path(nvcc).resolve().parent.parent))
    if deep and version:
        checks.append(_host_compiler_check(nvcc, _host_compiler(host)))
    return Report(tuple(checks), host_defines={"CMAKE_CUDA_COMPILER": nvcc}, versions={"nvcc": version or "?"})


def kernel_findings(sass: Sequence[str], ptx: Sequence[str], capabilities: list[str]) -> list[tuple[str, str]]:
    """(severity, line) per visible GPU whose capability this build has no machine code for.

    SASS for sm_XY runs on X.Y and newer minors of the same major; PTX for compute_XY is JIT-compiled by the driver
    on any GPU of at least X.Y; with neither, CUDA fails with "no kernel image is available".
    """
    have_sass = [int(s.split("_")[1].rstrip("af")) for s in sass]
    have_ptx = [int(p.split("_")[1].rstrip("af")) for p in ptx]
    findings = []
    for capability in capabilities:
        major, minor = (int(part) for part in capability.split("."))
        number = major * 10 + minor
        if any(s // 10 == major and s <= number for s in have_sass):
            continue
        jit = [p for p in have_ptx if p <= number]
        built = ", ".join(sass + ptx) or "no CUDA code"
        if jit:
            findings.append(
                (
                    "warning",
                    (
                        f"CUDA: a GPU of compute capability {capability} has no sm_{number} code in this build ({built}); "
                        f"the driver will JIT-compile compute_{max(jit)} PTX at first use (a slow first start, cached in "
                        f"~/.nv/ComputeCache); build with --sm {number} for native code"
                    ),
                )
            )
        else:
            findings.append(
                (
                    "error",
                    (
                        f"CUDA: a GPU of compute capability {capability} can run nothing in this build ({built}): CUDA "
                        f"would fail with 'no kernel image is available'; build with --sm {number}"
                    ),
                )
            )
    return findings


def why_absent(environ: dict[str, str], vulkan: list[VulkanGpu], nvidia: list[NvidiaGpu]) -> str | None:
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every CUDA device"
    if not nvidia:
        return "no NVIDIA GPU visible (nvidia-smi found none)"
    return "no device found"


def resolve_arch(text: str | None, host: Host, memo: Memo) -> tuple[str, str]:
    """`--sm` → CMAKE_CUDA_ARCHITECTURES. A named --sm is remembered with nvcc's stamps; none or 'native' asks the
    GPUs every time."""
    ask = functools.partial(resolve_sm, text, host.environ)
    if asks_the_gpus(text):
        return ask()
    return memo.recall(["--sm", text, stamps(inputs(host))], ask, list, tuple)


ARCH = ArchOption("--sm", "CMAKE_CUDA_ARCHITECTURES", "CUDA", "buildmgr build cuda --sm 86", resolve_arch)


def match_nvidia_smi(devices: list[Device], nvidia: list[NvidiaGpu]) -> list[Device]:
    """nvidia-smi's UUID and PCI id for the devices that are its GPUs: any backend's device by PCI id; a CUDA device
    without one by name where the match is one to one, or when it is the only CUDA device and the only GPU."""
    by_pci = {g.pci_bus_id: g for g in nvidia}
    unplaced = [d for d in devices if d.backend == NAME and d.pci_bus_id is None]
    by_name = one_to_one(unplaced, nvidia, lambda d, g: g.name == d.description)
    if not by_name and len(nvidia) == 1 and len(unplaced) == 1 == sum(d.backend == NAME for d in devices):
        by_name = {unplaced[0].name: nvidia[0]}
    matched = []
    for device in devices:
        gpu = by_pci.get(device.pci_bus_id) if device.pci_bus_id else by_name.get(device.name)
        if gpu is not None:
            device = dataclasses.replace(device, uuid=gpu.uuid, pci_bus_id=device.pci_bus_id or gpu.pci_bus_id)
        matched.append(device)
    return matched
