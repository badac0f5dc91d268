"""HIP (ROCm): AMD GPUs. Needs ROCm >= 6.1 with hipBLAS and rocBLAS; `--gfx` picks GPU_TARGETS."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from buildmgr import proc
from buildmgr.backends import ArchOption, Check, Host, Memo, Report, which
from buildmgr.errors import UserError

NAME = "ROCm"
GGML_TARGET = "ggml-hip"
MIN_CMAKE = "3.21"
GIB_PER_JOB = 4.0
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = (
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
)
# Libraries the built files may need from the host (soname stem → where it comes from).
RUNTIME_LIBRARIES = {
    "libamdhip64.so": "ROCm's HIP runtime (apt hip-runtime-amd)",
    "libhipblas.so": "ROCm's hipBLAS (apt hipblas)",
    "librocblas.so": "ROCm's rocBLAS (apt rocblas)",
}
# Where the artifacts workflow can build it, and the provisioning step it needs (None: no step for it yet).
SYSTEMS = ("linux",)
CI_SETUP = None
DRIVER_LIBRARY = ""
MIN_ROCM = Version("6.1")
ROCM_FIX = (
    "install ROCm >= 6.1 from AMD's repository (Debian 12 itself only packages ROCm 5.x) "
    "and set ROCM_PATH if it is not /opt/rocm"
)
_GFX = re.compile(r"^gfx[0-9a-f]{3,4}$")


def parse_gfx(text: str) -> tuple[str, str]:
    """`--gfx gfx1100,gfx1151` → (GPU_TARGETS value, label for the build id)."""
    targets = []
    for item in (part.strip().lower() for part in text.split(",")):
        if not _GFX.match(item):
            raise UserError(
                f"--gfx {item!r} is not an AMD GPU target; use names like gfx1100 or gfx1151 "
                "(rocminfo | grep gfx lists this host's)"
            )
        targets.append(item)
    unique = sorted(set(targets))
    return ";".join(unique), "_".join(unique)


def parse_rocm_version(text: str) -> Version | None:
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    try:
        return Version(match.group(1)) if match else None
    except InvalidVersion:
        return None


def _rocm(host: Host) -> Path:
    return Path(host.environ.get("ROCM_PATH", "/opt/rocm"))


def inputs(host: Host) -> tuple[str, ...]:
    """The files behind what inspect() finds: hipconfig, the hipBLAS/rocBLAS CMake packages and ROCm's clang."""
    rocm = _rocm(host)
    hipconfig = which("hipconfig", str(rocm / "bin"))
    packages = [str(rocm / "lib" / "cmake" / package) for package in ("hipblas", "rocblas")]
    return (*([hipconfig] if hipconfig else []), *packages, str(rocm / "llvm" / "bin" / "clang"))


def inspect(host: Host, deep: bool) -> Report:
    rocm = _rocm(host)
    hipconfig = which("hipconfig", str(rocm / "bin"))
    if hipconfig is None:
        return Report((Check(NAME, "ROCm (hipconfig)", False, f"not found in {rocm}/bin or PATH", ROCM_FIX),))
    version = parse_rocm_version(proc.run([hipconfig, "--version"], timeout=60).output)
    checks = [Check(NAME, "ROCm", bool(version and version >= MIN_ROCM), f"{version} at {rocm}", ROCM_FIX)]
    for package in ("hipblas", "rocblas"):
        config = rocm / "lib" / "cmake" / package
        checks.append(
            Check(
                NAME,
                package,
                config.is_dir(),
                str(config) if config.is_dir() else "not found",
                f"install {package}-dev from the ROCm repository",
            )
        )
    clang = rocm / "llvm" / "bin" / "clang"
    defines = {"CMAKE_HIP_COMPILER": str(clang)} if clang.exists() else {}
    return Report(tuple(checks), defines, {"rocm": str(version)})


def visible_targets(environ: dict[str, str]) -> list[str]:
    """The gfx targets of this host's AMD GPUs, as rocminfo lists them (gfx000 is the CPU agent)."""
    rocminfo = which("rocminfo", str(Path(environ.get("ROCM_PATH", "/opt/rocm")) / "bin"))
    found = (
        sorted(set(re.findall(r"\b(gfx[0-9a-f]{3,4})\b", proc.run([rocminfo], timeout=60).output))) if rocminfo else []
    )
    return [g for g in found if g != "gfx000"]


def kernel_findings(targets: Sequence[str], visible: list[str]) -> list[tuple[str, str]]:
    """(severity, line) per visible AMD GPU whose gfx target is not compiled in (HIP code objects do not JIT)."""
    return [
        (
            "error",
            (
                f"HIP: the {gfx} GPU has no code in this build ({', '.join(targets) or 'none'}): it would fail with "
                f"'no kernel image is available'; build with --gfx {gfx}"
            ),
        )
        for gfx in visible
        if gfx not in targets
    ]


def resolve_gfx(text: str | None, environ: dict[str, str]) -> tuple[str, str]:
    """`--gfx`, or this host's GPUs as rocminfo lists them."""
    if text is None:
        found = visible_targets(environ)
        if not found:
            raise UserError("no AMD GPU found to build for (rocminfo); name the targets, e.g. --gfx gfx1100,gfx1151")
        text = ",".join(found)
    return parse_gfx(text)


def why_absent(environ: dict[str, str], vulkan: list, nvidia: list) -> str | None:
    if any(environ.get(k) in ("", "-1") for k in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if k in environ):
        return "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES hides every ROCm device"
    return "no device found"


def resolve_arch(text: str | None, host: Host, memo: Memo) -> tuple[str, str]:
    """`--gfx` → GPU_TARGETS; without it, this host's GPUs (asked every time)."""
    return resolve_gfx(text, host.environ)


ARCH = ArchOption("--gfx", "GPU_TARGETS", "HIP", "buildmgr build hip --gfx gfx1100", resolve_arch)
