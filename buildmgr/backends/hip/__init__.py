"""HIP (ROCm): AMD GPUs. Needs ROCm >= 6.1 with hipBLAS and rocBLAS. What is known about it, as data; what it does is
in this package's modules (`preflight`: where ROCm is and what it has; `arch`: `--gfx` checked against ROCm's clang
and rocBLAS's kernels; `device_code`: the gfx code objects in `.hip_fatbin` and this host's GPUs from amdkfd;
`engines`: amdgpu's sysfs during a benchmark), each imported when first used.

Where ROCm is installed is data: each layout names its root and where hipconfig, the hipBLAS/rocBLAS CMake packages
and ROCm's clang sit under it, so a distribution's layout is one more row of `LAYOUTS`.
"""

from __future__ import annotations

from typing import NamedTuple

from buildmgr.backend_spec import ArchOption, Backend, Ci, DeviceCode, NameRole, Names, RemovedKernels, lazy
from buildmgr.core.device_records import Role

NAMES = Names("ROCm", "hip", "HIP", "GGML_HIP", "ggml-hip")
NAME = NAMES.device
MIN_ROCM = "6.1"
TOO_OLD = "At least ROCM/HIP V6.1 is required"  # ggml/src/ggml-hip/CMakeLists.txt at the pin
ROCM_FIX = (
    "install ROCm >= 6.1: AMD's repository (/opt/rocm; set ROCM_PATH if elsewhere), or a distribution's own "
    "packages under /usr (Debian sid: apt install hipcc libhipblas-dev librocblas-dev rocm-cmake; Debian 12 and 13 "
    "only package ROCm 5.x)"
)
PACKAGES = ("hipblas", "rocblas")  # the CMake packages ggml-hip finds
AMD_VENDOR = "0x1002"  # PCI vendor id, in sysfs


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


def gfx_key(gfx: str) -> tuple[int, str]:
    """gfx803 < gfx90a < gfx1100: by generation, then the rest."""
    digits = gfx[3:]
    return (int(digits[:-2] or "0"), digits[-2:])


ARCH = ArchOption(
    flag="--gfx",
    define="GPU_TARGETS",
    owns=("GPU_TARGETS", "AMDGPU_TARGETS"),
    language=NAMES.title,
    example="buildmgr build hip --gfx gfx1100",
    help="AMD GPU targets for HIP, e.g. gfx1100,gfx1151 (default: this host's GPUs)",
    matrix_help="HIP targets of one variant, e.g. gfx1100 (repeatable)",
    resolve=lazy(f"{__name__}.arch", "resolve_arch"),
    ci_label=lazy(f"{__name__}.arch", "ci_label"),
    ci_missing="it has HIP: name the targets with --gfx",
    from_defines=lazy(f"{__name__}.arch", "gfx_from_defines"),
)

DEVICE_CODE = DeviceCode(
    ".hip_fatbin",
    lazy(f"{__name__}.device_code", "code_objects"),
    str,
    "hip",
    lazy(f"{__name__}.device_code", "host_findings"),
    ("hip_targets",),
    lazy(f"{__name__}.device_code", "visible_targets"),
    lazy(f"{__name__}.device_code", "kernel_findings"),
    r"gfx[0-9a-f]+",
)

# AMD's integrated GPUs, by the names drivers give them. A plain "AMD Radeon Graphics" is not among them: RADV gives that
# name to discrete cards it has no marketing name for ("AMD Radeon Graphics (RADV GFX1201)").
NAME_ROLES = (
    NameRole(
        r"\(RADV (?:KAVERI|KABINI|MULLINS|CARRIZO|STONEY|RAVEN2?|RENOIR|VANGOGH|REMBRANDT|RAPHAEL_MENDOCINO|MENDOCINO"
        r"|PHOENIX2?|HAWK_POINT\d?|GFX1103(?:_R\d)?|GFX115[0-3])\)",
        Role.IGPU,
        "RADV names this APU family (Ryzen graphics)",
        "https://gitlab.freedesktop.org/mesa/mesa/-/blob/main/src/amd/common/amd_family.c",
    ),
    NameRole(
        r"\bRadeon(?:\(TM\))? (?:[5-9][0-9]0M|Vega \d+|80[4-6]0S)\b",
        Role.IGPU,
        "Radeon 610M–890M, Vega N and 8040S–8060S are the graphics of Ryzen APUs",
        "https://www.amd.com/en/products/specifications/processors.html",
    ),
    NameRole(
        r"^AMD Radeon\(TM\) Graphics\b|\bRyzen\b.* with Radeon",
        Role.IGPU,
        "AMD's driver names APU graphics 'AMD Radeon(TM) Graphics' or after the Ryzen CPU",
        "https://gitlab.freedesktop.org/mesa/drm/-/blob/main/data/amdgpu.ids",
    ),
    NameRole(
        r"\bgfx(?:90c|1035|1036|1037|1103|115[0-3])\b",
        Role.IGPU,
        "this gfx target is an APU's",
        "https://llvm.org/docs/AMDGPUUsage.html#processors",
    ),
)

BACKEND = Backend(
    NAMES,
    order=30,
    min_cmake="3.21",
    gib_per_job=4.0,
    enumeration_env=("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"),
    runtime_libraries={
        "libamdhip64.so": "ROCm's HIP runtime (AMD's repository: hip-runtime-amd; Debian: libamdhip64-6)",
        "libhipblas.so": "ROCm's hipBLAS (AMD's repository: hipblas; Debian: libhipblas2)",
        "librocblas.so": "ROCm's rocBLAS (AMD's repository: rocblas; Debian: librocblas4)",
    },
    # A Linux runner builds HIP in Debian sid's container, whose own ROCm (6.4, under /usr) this step installs;
    # llama.cpp refuses ROCm < 6.1, which every Ubuntu LTS image carries. sid's Release file can be past its
    # Valid-Until date between archive runs, hence the option.
    ci=Ci(
        "rocm",
        apt=("hipcc", "libhipblas-dev", "librocblas-dev", "rocm-cmake"),
        apt_options=("-o", "Acquire::Check-Valid-Until=false"),
        runner=("ubuntu-24.04", "debian:sid"),
    ),
    needs_own_build=True,
    locate=lazy(f"{__name__}.preflight", "locate"),
    inspect=lazy(f"{__name__}.preflight", "inspect"),
    why_absent=lazy(f"{__name__}.device_code", "why_absent"),
    languages=("HIP",),
    arch=ARCH,
    device_code=DEVICE_CODE,
    engines=lazy(f"{__name__}.engines", "SysfsEngines.open"),
    engines_source="amdgpu sysfs",
    name_roles=NAME_ROLES,
    # ggml-hip builds ggml-cuda's sources and takes the same define (ggml/src/ggml-hip/CMakeLists.txt at the pin)
    removed_kernels=(
        RemovedKernels(
            "GGML_CUDA_FA",
            "OFF",
            ("FLASH_ATTN_EXT",),
            NAMES.device,
            ("flash_attn", "on"),
            "-fa 1",
            "this build has no ROCm FlashAttention kernels",
        ),
    ),
)
