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
    "libamdhip64.so": "ROCm's HIP runtime (AMD's repository: hip-runtime-amd; Debian: libamdhip64-6)",
    "libhipblas.so": "ROCm's hipBLAS (AMD's repository: hipblas; Debian: libhipblas2)",
    "librocblas.so": "ROCm's rocBLAS (AMD's repository: rocblas; Debian: librocblas4)",
}
# Where the artifacts workflow can build it, and the provisioning step it needs (None: no step for it yet).
SYSTEMS = ("linux",)
CI_SETUP = "rocm"
# A Linux runner builds HIP in Debian sid's container, whose own ROCm (6.4, under /usr) the workflow's "rocm" step
# installs; llama.cpp refuses ROCm < 6.1, which every Ubuntu LTS image carries.
CI_CONTAINER = "debian:sid"
DRIVER_LIBRARY = ""
MIN_ROCM = Version("6.1")
TOO_OLD = "At least ROCM/HIP V6.1 is required"  # ggml/src/ggml-hip/CMakeLists.txt at the pin
ROCM_FIX = (
    "install ROCm >= 6.1: AMD's repository (/opt/rocm; set ROCM_PATH if elsewhere), or a distribution's own "
    "packages under /usr (Debian sid: apt install hipcc libhipblas-dev librocblas-dev rocm-cmake; Debian 12 and 13 "
    "only package ROCm 5.x)"
)
_GFX = re.compile(r"^gfx[0-9a-f]{3,4}$")
_HIP_TARGET = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)")


class Layout(NamedTuple):
    """Where one kind of ROCm installation keeps what the build needs, relative to its root (globs where a
    distribution puts a version or an architecture in the path)."""

    name: str
    root: str  # ROCM_PATH overrides it
    bin: str = "bin"
    cmake_packages: str = "lib/cmake"
    clang: str = "llvm/bin/clang"  # where `hipconfig --hipclangpath` does not say
    rocblas_kernels: str = "lib/rocblas/library"  # rocBLAS's Tensile kernels, one file set per gfx target


LAYOUTS = (
    Layout("AMD's ROCm", "/opt/rocm"),
    # Debian's and Ubuntu's packages: hipcc and hipconfig in /usr/bin, ROCm's clang is the distribution's clang-NN,
    # the CMake packages and rocBLAS's kernels under the multiarch library folder.
    Layout(
        "the distribution's ROCm under /usr",
        "/usr",
        cmake_packages="lib/*-linux-gnu/cmake",
        clang="lib/llvm-*/bin/clang",
        rocblas_kernels="lib/*-linux-gnu/rocblas/*/library",
    ),
)
_PACKAGES = ("hipblas", "rocblas")


def _first(root: Path, pattern: str) -> Path:
    """The path a layout's pattern names under root: the last match of a glob (the newest version), or the plain path."""
    if not any(c in pattern for c in "*?["):
        return root / pattern
    found = sorted(root.glob(pattern), key=lambda p: [int(n) for n in re.findall(r"\d+", str(p))])
    return found[-1] if found else root / pattern


class Rocm(NamedTuple):
    """ROCm as found here, in one layout."""

    layout: Layout
    root: Path
    hipconfig: str | None
    clang: Path  # ROCm's clang: where hipconfig says it is, else where the layout keeps it

    @property
    def packages(self) -> dict[str, Path]:
        return {name: _first(self.root, self.layout.cmake_packages) / name for name in _PACKAGES}

    @property
    def rocblas_kernels(self) -> Path:
        return _first(self.root, self.layout.rocblas_kernels)

    @property
    def bin(self) -> Path:
        return self.root / self.layout.bin

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files behind what inspect() finds: hipconfig, the hipBLAS/rocBLAS CMake packages, ROCm's clang and the
        folder of rocBLAS's kernels (its targets are a check)."""
        return (
            *([self.hipconfig] if self.hipconfig else []),
            *map(str, self.packages.values()),
            str(self.clang),
            str(self.rocblas_kernels),
        )


def find_rocm(environ: Mapping[str, str]) -> Rocm:
    """The first layout whose hipconfig and CMake packages are where that layout keeps them (ROCM_PATH moves every
    layout's root), else the first with hipconfig there, else the first layout, with hipconfig from PATH if there."""
    found: list[tuple[Layout, Path, str | None]] = []
    for layout in LAYOUTS:
        root = Path(environ.get("ROCM_PATH", layout.root))
        bindir = root / layout.bin
        if os.access(bindir / "hipconfig", os.X_OK):
            if _first(root, layout.cmake_packages).is_dir():
                return _rocm(layout, root, str(bindir / "hipconfig"))
            found.insert(0, (layout, root, str(bindir / "hipconfig")))
        else:
            found.append((layout, root, which("hipconfig", str(bindir))))
    return _rocm(*found[0])


def _rocm(layout: Layout, root: Path, hipconfig: str | None) -> Rocm:
    """The ROCm found, its clang asked of hipconfig once (Debian's is the distribution's clang-NN)."""
    said = proc.run([hipconfig, "--hipclangpath"], timeout=60).stdout.strip() if hipconfig else ""
    clang = Path(said, "clang") if said and Path(said, "clang").is_file() else _first(root, layout.clang)
    return Rocm(layout, root, hipconfig, clang)


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
    recent = bool(version and version >= MIN_ROCM)
    fix = ROCM_FIX if recent else f"llama.cpp at the pin stops with '{TOO_OLD}': {ROCM_FIX}"
    checks = [Check(NAME, "ROCm", recent, f"{version} at {found.root}", fix)]
    versions = {"rocm": str(version)}
    for package, config in found.packages.items():
        said = package_version(config, package)
        versions |= {package: said} if said else {}
        checks.append(
            Check(
                NAME,
                package,
                config.is_dir(),
                (f"{said} at {config}" if said else str(config)) if config.is_dir() else "not found",
                f"install {package}-dev from AMD's ROCm repository, or lib{package}-dev from your distribution",
            )
        )
    clang = found.clang
    checks.append(
        Check(NAME, "ROCm's clang", clang.is_file(), str(clang) if clang.is_file() else "not found", ROCM_FIX)
    )
    kernels = rocblas_targets(found)
    checks.append(
        Check(
            NAME,
            "rocBLAS kernels",
            bool(kernels),
            f"{', '.join(sorted(kernels, key=gfx_key))} in {found.rocblas_kernels}" if kernels else "none found",
            "install librocblas (rocblas from AMD's repository): llama.cpp's matrix products need its kernels",
        )
    )
    defines = {"CMAKE_HIP_COMPILER": str(clang)} if clang.is_file() else {}
    return Report(tuple(checks), defines, versions)


def package_version(config: Path, name: str) -> str | None:
    """A CMake package's version, from its `<name>-config-version.cmake`."""
    match = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', _read(config / f"{name}-config-version.cmake") or "")
    return match.group(1) if match else None


def gfx_key(gfx: str) -> tuple[int, str]:
    """gfx803 < gfx90a < gfx1100: by generation, then the rest."""
    digits = gfx[3:]
    return (int(digits[:-2] or "0"), digits[-2:])


def rocblas_targets(rocm: Rocm) -> set[str]:
    """The gfx targets rocBLAS ships kernels for here: its Tensile library files are named by target
    (`TensileLibrary_lazy_gfx1100.dat`, which rocBLAS loads for a gfx1100 GPU)."""
    library = rocm.rocblas_kernels
    names = (p.name for p in library.iterdir()) if library.is_dir() else ()
    return {m.group(1) for name in names if (m := re.match(r"TensileLibrary.*[-_](gfx[0-9a-f]{3,4})[-_.]", name))}


def clang_targets(clang: Path) -> set[str]:
    """The gfx targets ROCm's clang can compile; a clang that cannot say is an error, not a skipped check."""
    ran = proc.run([str(clang), "--target=amdgcn-amd-amdhsa", "--print-supported-cpus"], timeout=60)
    known = set(re.findall(r"^\s*(gfx[0-9a-f]{3,4})\s*$", ran.output, flags=re.MULTILINE)) if ran.ok else set()
    if not known:
        said = ran.failure() if not ran.ok else (ran.output.strip().splitlines() or ["no gfx target listed"])[-1]
        raise UserError(f"cannot ask ROCm's clang ({clang}) which targets it compiles: {said}")
    return known


def check_gfx(targets: Sequence[str], rocm: Rocm) -> None:
    """Refuse, before anything is configured, a target this ROCm cannot compile or has no rocBLAS kernels for."""
    clang = rocm.clang
    known = clang_targets(clang) if clang.is_file() else set()
    kernels = rocblas_targets(rocm)
    for gfx in targets:
        if known and gfx not in known:
            raise UserError(
                f"--gfx {gfx}: ROCm's clang ({clang}) cannot compile it; it knows "
                f"{', '.join(sorted(known, key=gfx_key))}"
            )
        if kernels and gfx not in kernels:
            raise UserError(
                f"--gfx {gfx}: this ROCm's rocBLAS has no kernels for it ({rocm.rocblas_kernels}), so llama.cpp's "
                f"matrix products would fail there; it has {', '.join(sorted(kernels, key=gfx_key))}"
            )


def kfd_targets(sys_root: Path = Path("/sys")) -> list[str]:
    """The gfx targets of this host's AMD GPUs as the kernel's amdkfd lists them: each topology node's
    `gfx_target_version` (major·10000 + minor·100 + stepping; 0 for a CPU node), without any ROCm installed."""
    found = set()
    for properties in sorted((sys_root / "class" / "kfd" / "kfd" / "topology" / "nodes").glob("*/properties")):
        match = re.search(r"^gfx_target_version (\d+)$", _read(properties) or "", flags=re.MULTILINE)
        version = int(match.group(1)) if match else 0
        if version:
            found.add(f"gfx{version // 10000}{version // 100 % 100:x}{version % 100:x}")
    return sorted(found, key=gfx_key)


def visible_targets(environ: Mapping[str, str], sys_root: Path = Path("/sys")) -> list[str]:
    """The gfx targets of this host's AMD GPUs: amdkfd's topology, else rocminfo's list (gfx000 is the CPU agent)."""
    found = kfd_targets(sys_root)
    rocminfo = which("rocminfo", str(find_rocm(environ).bin)) if not found else None
    if rocminfo:
        found = sorted(set(re.findall(r"\b(gfx[0-9a-f]{3,4})\b", proc.run([rocminfo], timeout=60).output)), key=gfx_key)
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


KFD = Path("/dev/kfd")  # amdkfd's device: present wherever amdgpu drives a GPU that HIP can use


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    if any(environ.get(k) in ("", "-1") for k in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if k in environ):
        return "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES hides every ROCm device"
    if not KFD.exists():
        return "no HIP device on this host (no /dev/kfd: the amdgpu kernel driver has no GPU here)"
    return "no device found"


def resolve_arch(text: str | None, host: Host, memo: Memo) -> tuple[str, str]:
    """`--gfx` → GPU_TARGETS; without it, this host's GPUs (asked every time). Each target is checked against what
    the ROCm found here can compile and has rocBLAS kernels for."""
    value, label = resolve_gfx(text, host.environ)
    rocm = find_rocm(host.environ)
    if rocm.hipconfig is not None:
        check_gfx(value.split(";"), rocm)
    return value, label


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
    languages=("HIP",),
    arch=ARCH,
    device_code=DEVICE_CODE,
    engines=SysfsEngines.open,
    name_roles=NAME_ROLES,
    ci_runner=("ubuntu-24.04", CI_CONTAINER),
)
