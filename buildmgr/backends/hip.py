"""HIP (ROCm): AMD GPUs. Needs ROCm >= 6.1 with hipBLAS and rocBLAS; `--gfx` picks GPU_TARGETS; the gfx code objects
in `.hip_fatbin`.

Where ROCm is installed is data: each layout names its root and where hipconfig, the hipBLAS/rocBLAS CMake packages
and ROCm's clang sit under it, so a distribution's layout is one more row of `LAYOUTS`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from packaging.version import InvalidVersion, Version

from buildmgr import proc
from buildmgr.backends.base import (
    ArchOption,
    DeviceCode,
    EngineReading,
    Extras,
    Host,
    NameRole,
    Report,
    process_name,
    which,
)
from buildmgr.errors import UserError
from buildmgr.findings import Check, Finding
from buildmgr.memo import Memo

if TYPE_CHECKING:
    from buildmgr.devices import Captures

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
_HIP_TARGET = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)")


class Layout(NamedTuple):
    """Where one kind of ROCm installation keeps what the build needs, relative to its root."""

    name: str
    root: str  # ROCM_PATH overrides it
    bin: str = "bin"
    cmake_packages: str = "lib/cmake"
    clang: str = "llvm/bin/clang"


LAYOUTS = (Layout("AMD's ROCm", "/opt/rocm"),)
_PACKAGES = ("hipblas", "rocblas")


class Rocm(NamedTuple):
    """ROCm as found here, in one layout."""

    layout: Layout
    root: Path
    hipconfig: str | None

    @property
    def packages(self) -> dict[str, Path]:
        return {name: self.root / self.layout.cmake_packages / name for name in _PACKAGES}

    @property
    def clang(self) -> Path:
        return self.root / self.layout.clang

    @property
    def bin(self) -> Path:
        return self.root / self.layout.bin

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files behind what inspect() finds: hipconfig, the hipBLAS/rocBLAS CMake packages and ROCm's clang."""
        return (*([self.hipconfig] if self.hipconfig else []), *map(str, self.packages.values()), str(self.clang))


def find_rocm(environ: Mapping[str, str]) -> Rocm:
    """The first layout whose hipconfig is where that layout keeps it (ROCM_PATH moves every layout's root), else the
    first layout, with hipconfig from PATH if it is there."""
    found = []
    for layout in LAYOUTS:
        root = Path(environ.get("ROCM_PATH", layout.root))
        bindir = root / layout.bin
        if os.access(bindir / "hipconfig", os.X_OK):
            return Rocm(layout, root, str(bindir / "hipconfig"))
        found.append(Rocm(layout, root, which("hipconfig", str(bindir))))
    return found[0]


def locate(host: Host) -> Rocm:
    return find_rocm(host.environ)


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


def inspect(host: Host, found: Rocm, deep: bool) -> Report:
    if found.hipconfig is None:
        return Report((Check(NAME, "ROCm (hipconfig)", False, f"not found in {found.bin} or PATH", ROCM_FIX),))
    version = parse_rocm_version(proc.run([found.hipconfig, "--version"], timeout=60).output)
    checks = [Check(NAME, "ROCm", bool(version and version >= MIN_ROCM), f"{version} at {found.root}", ROCM_FIX)]
    for package, config in found.packages.items():
        checks.append(
            Check(
                NAME,
                package,
                config.is_dir(),
                str(config) if config.is_dir() else "not found",
                f"install {package}-dev from the ROCm repository",
            )
        )
    defines = {"CMAKE_HIP_COMPILER": str(found.clang)} if found.clang.exists() else {}
    return Report(tuple(checks), defines, {"rocm": str(version)})


def visible_targets(environ: Mapping[str, str]) -> list[str]:
    """The gfx targets of this host's AMD GPUs, as rocminfo lists them (gfx000 is the CPU agent)."""
    rocminfo = which("rocminfo", str(find_rocm(environ).bin))
    found = (
        sorted(set(re.findall(r"\b(gfx[0-9a-f]{3,4})\b", proc.run([rocminfo], timeout=60).output))) if rocminfo else []
    )
    return [g for g in found if g != "gfx000"]


def kernel_findings(targets: Sequence[str], visible: list[str]) -> list[Finding]:
    """An error per visible AMD GPU whose gfx target is not compiled in (HIP code objects do not JIT)."""
    return [
        Finding(
            "error",
            "HIP",
            f"the {gfx} GPU has no code in this build ({', '.join(targets) or 'none'}): it would fail with "
            f"'no kernel image is available'",
            f"build with --gfx {gfx}",
        )
        for gfx in visible
        if gfx not in targets
    ]


DEVICE_CODE = DeviceCode(
    ".hip_fatbin",
    lambda data: {m.decode() for m in _HIP_TARGET.findall(data)},
    str,
    "hip",
    lambda codes, environ: kernel_findings(codes, visible_targets(environ)),
    ("hip_targets",),
)


def resolve_gfx(text: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """`--gfx`, or this host's GPUs as rocminfo lists them."""
    if text is None:
        found = visible_targets(environ)
        if not found:
            raise UserError("no AMD GPU found to build for (rocminfo); name the targets, e.g. --gfx gfx1100,gfx1151")
        text = ",".join(found)
    return parse_gfx(text)


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    if any(environ.get(k) in ("", "-1") for k in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if k in environ):
        return "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES hides every ROCm device"
    return "no device found"


def resolve_arch(text: str | None, host: Host, memo: Memo) -> tuple[str, str]:
    """`--gfx` → GPU_TARGETS; without it, this host's GPUs (asked every time)."""
    return resolve_gfx(text, host.environ)


def gfx_from_defines(defines: Mapping[str, str]) -> str | None:
    value = defines.get("GPU_TARGETS")
    return ",".join(value.split(";")) if value else None


ARCH = ArchOption(
    flag="--gfx",
    define="GPU_TARGETS",
    owns=("GPU_TARGETS", "AMDGPU_TARGETS"),
    language="HIP",
    example="buildmgr build hip --gfx gfx1100",
    help="AMD GPU targets for HIP, e.g. gfx1100,gfx1151 (default: this host's GPUs)",
    matrix_help="HIP targets of one variant, e.g. gfx1100 (repeatable)",
    resolve=resolve_arch,
    ci_label=lambda text: parse_gfx(text)[1],
    ci_missing="it has HIP: name the targets with --gfx",
    from_defines=gfx_from_defines,
)


# --- amdgpu's sysfs: the GPUs' engines during a benchmark -------------------------------------------------------------

AMD_VENDOR = "0x1002"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _hwmon(device: Path, name: str) -> int | None:
    return next((v for h in sorted(device.glob("hwmon/hwmon*")) if (v := _int(h / name)) is not None), None)


def amd_reading(device: Path) -> EngineReading | None:
    """One card's `/sys/class/drm/cardN/device`: gpu_busy_percent, mem_info_vram_used (bytes), the current sclk
    (the `*` line of pp_dpm_sclk) and hwmon's power1_average (µW; power1_input on newer kernels)."""
    from buildmgr.devices import normalize_pci

    if _read(device / "vendor") != AMD_VENDOR:
        return None
    uevent = dict(line.split("=", 1) for line in (_read(device / "uevent") or "").splitlines() if "=" in line)
    clock = re.search(r"(\d+)\s*mhz\s*\*", (_read(device / "pp_dpm_sclk") or "").lower())
    used = _int(device / "mem_info_vram_used")
    power = _hwmon(device, "power1_average") or _hwmon(device, "power1_input")
    busy = _int(device / "gpu_busy_percent")
    return EngineReading(
        normalize_pci(uevent.get("PCI_SLOT_NAME")) or uevent.get("PCI_SLOT_NAME", ""),
        float(busy) if busy is not None else None,
        used >> 20 if used is not None else None,
        int(clock.group(1)) if clock else None,
        power / 1e6 if power is not None else None,
    )


class SysfsEngines:
    """amdgpu's own files: what rocm-smi reads, without it."""

    def __init__(self, sys_root: Path = Path("/sys")) -> None:
        self.root = sys_root
        cards = sorted(c for c in (sys_root / "class" / "drm").glob("card*") if re.fullmatch(r"card\d+", c.name))
        self.devices = [c / "device" for c in cards if _read(c / "device" / "vendor") == AMD_VENDOR]

    @classmethod
    def open(cls, sys_root: Path = Path("/sys")) -> SysfsEngines | None:
        found = cls(sys_root)
        return found if found.devices else None

    def read(self) -> list[EngineReading]:
        return [r for d in self.devices if (r := amd_reading(d)) is not None]

    def users(self) -> list[tuple[int, str]]:
        """amdkfd lists every process with GPU queues under /sys/class/kfd/kfd/proc/PID."""
        procs = self.root / "class" / "kfd" / "kfd" / "proc"
        pids = sorted(int(p.name) for p in procs.iterdir() if p.name.isdigit()) if procs.is_dir() else []
        return [(pid, process_name(pid)) for pid in pids]

    def limits(self) -> list[str]:
        notes = []
        for device in self.devices:
            cap, default = _hwmon(device, "power1_cap"), _hwmon(device, "power1_cap_default")
            if cap is not None and default is not None and cap < default:
                notes.append(
                    f"GPU {device.resolve().name}: power cap {cap / 1e6:.0f} W is below its default {default / 1e6:.0f} W"
                )
        return notes

    def close(self) -> None:
        pass


# AMD's integrated GPUs, by the names drivers give them. A plain "AMD Radeon Graphics" is not among them: RADV gives that
# name to discrete cards it has no marketing name for ("AMD Radeon Graphics (RADV GFX1201)").
NAME_ROLES = (
    NameRole(
        r"\(RADV (?:KAVERI|KABINI|MULLINS|CARRIZO|STONEY|RAVEN2?|RENOIR|VANGOGH|REMBRANDT|RAPHAEL_MENDOCINO|MENDOCINO"
        r"|PHOENIX2?|HAWK_POINT\d?|GFX1103(?:_R\d)?|GFX115[0-3])\)",
        "igpu",
        "RADV names this APU family (Ryzen graphics)",
        "https://gitlab.freedesktop.org/mesa/mesa/-/blob/main/src/amd/common/amd_family.c",
    ),
    NameRole(
        r"\bRadeon(?:\(TM\))? (?:[5-9][0-9]0M|Vega \d+|80[4-6]0S)\b",
        "igpu",
        "Radeon 610M–890M, Vega N and 8040S–8060S are the graphics of Ryzen APUs",
        "https://www.amd.com/en/products/specifications/processors.html",
    ),
    NameRole(
        r"^AMD Radeon\(TM\) Graphics\b|\bRyzen\b.* with Radeon",
        "igpu",
        "AMD's driver names APU graphics 'AMD Radeon(TM) Graphics' or after the Ryzen CPU",
        "https://gitlab.freedesktop.org/mesa/drm/-/blob/main/data/amdgpu.ids",
    ),
    NameRole(
        r"\bgfx(?:90c|1035|1036|1037|1103|115[0-3])\b",
        "igpu",
        "this gfx target is an APU's",
        "https://llvm.org/docs/AMDGPUUsage.html#processors",
    ),
)

EXTRAS = Extras(
    languages=("HIP",), arch=ARCH, device_code=DEVICE_CODE, engines=SysfsEngines.open, name_roles=NAME_ROLES
)
