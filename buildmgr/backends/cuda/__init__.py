"""CUDA: NVIDIA GPUs through nvcc. What is known about it, as data; what it does is in this package's modules
(`preflight`: nvcc, cuBLAS and the host compiler; `arch`: `--sm`; `device_code`: the SASS and PTX in `.nv_fatbin`;
`smi`: nvidia-smi's view of the GPUs; `engines`: NVML during a benchmark; `kit`: the toolkit from NVIDIA's wheels),
each imported when first used.

Arch policy for `--sm`: real machine code (SASS) for every listed capability, and PTX only for
the highest, so newer GPUs can still JIT it: `--sm 86,89` → CMAKE_CUDA_ARCHITECTURES=86-real;89.
"""

from __future__ import annotations

from buildmgr.backend_spec import (
    ArchOption,
    Backend,
    Capture,
    Ci,
    DeviceCode,
    LogDevice,
    NameRole,
    Names,
    RemovedKernels,
    Virtual,
    lazy,
)
from buildmgr.core.device_records import Role
from buildmgr.core.findings import Signature
from buildmgr.tools.kit_spec import Kit, PipSource

NAMES = Names("CUDA", "cuda", "CUDA", "GGML_CUDA", "ggml-cuda")
NAME = NAMES.device
# The workflow's CUDA toolkit: upstream's own release image at the pin. Its major decides the lowest --sm.
CI_IMAGE_VERSION = "13.4.1"
CI_CONTAINER = f"nvidia/cuda:{CI_IMAGE_VERSION}-devel-ubuntu24.04"
TOOLKIT_ROOTS = ("CUDA_HOME", "CUDAToolkit_ROOT", "CUDA_PATH")  # variables naming the toolkit, first wins
# Lowest capability each nvcc major can build, when `nvcc --list-gpu-arch` is not available.
LOWEST_BY_MAJOR = {11: 35, 12: 50, 13: 75}
_RUNTIME = "'buildmgr toolchain add cuda-runtime=={major}'"

# ggml/src/ggml-cuda/CMakeLists.txt at the pin: GGML_CUDA_FA=OFF compiles GGML_CUDA_NO_FA, and supports_op then
# refuses FLASH_ATTN_EXT; with -fa on the scheduler runs attention on the CPU (0.047x decode on an H200, issue #47)
NO_FLASH_ATTENTION = RemovedKernels(
    "GGML_CUDA_FA",
    "OFF",
    ("FLASH_ATTN_EXT",),
    NAME,
    ("flash_attn", "on"),
    "-fa 1",
    "this build has no CUDA FlashAttention kernels",
)

BUILD_FAILURES = (
    Signature(
        "unsupported-gpu-arch",
        r"Unsupported gpu architecture '(compute|sm)_\d+\w*'",
        "this nvcc cannot build that compute capability: pick another --sm (CUDA 13 builds 75 and newer)",
    ),
    Signature(
        "no-cuda-device-for-native",
        r"Unsupported gpu architecture 'compute_No CUDA devices found",
        "CMake asked for the native CUDA arch on a host without a visible GPU: pass --sm, e.g. --sm 86",
    ),
    Signature(
        "unsupported-host-compiler",
        r"unsupported GNU version|unsupported (clang|Microsoft Visual Studio) version",
        "nvcc does not support this host compiler: install a supported gcc and set CUDAHOSTCXX=/usr/bin/g++-N",
    ),
    Signature(
        "cuda-driver-library-missing",
        r"CUDA::cuda_driver\s+but the target was not found",
        "the CUDA driver library (libcuda.so) is missing: buildmgr toolchain add cuda (its lib/stubs/libcuda.so), "
        "install the NVIDIA driver or the toolkit's lib64/stubs/libcuda.so, or build without it: -D GGML_CUDA_NO_VMM=ON",
    ),
)

# ggml-cuda's start-up lines, for CUDA and for its HIP and MUSA builds (the header names which):
# "ggml_cuda_init: found 2 CUDA devices (Total VRAM: …):" then "  Device 0: NAME, compute capability 8.6, VMM: yes[, VRAM:
# N MiB]" (ROCm: "NAME, gfx1151 (0x1151), …"); before 2024 the header was "ggml_init_cublas: found …".
LOG_DEVICES = (
    LogDevice(
        "ggml_cuda_init lines",
        r"(?<![\w-])Device (?P<index>\d+): (?P<description>[^,]*?), (?:compute capability \d+\.\d+|(?P<detail>gfx\w+) \(0x[0-9a-fA-F]+\))"
        r"(?:,.*?VRAM: (?P<total>\d+) MiB)?",
        NAME,
        # searched anywhere in the line: a paste that lost the first letters ("gml_init_cublas: found 2 ROCm …")
        after=r"(?:cuda_init|init_cublas): found \d+ (?P<backend>\S+) devices",
        starts=r"(?:cuda_init|init_cublas): found \d+ \S+ devices",
        formats=(
            r"%s: found %d {GGML_CUDA_NAME} devices (Total VRAM: %zu MiB):\n",
            r"  Device %d: %s, %s (0x%x), VMM: %s, Wave Size: %d, VRAM: %zu MiB\n",
            r"  Device %d: %s, compute capability %d.%d, VMM: %s, VRAM: %zu MiB\n",
        ),
    ),
)
LOG_EMPTY = (r"ggml_cuda_init: failed to initialize \S+: .*", r"ggml_(?:cuda_init|init_cublas): no \S+ devices found")
NAME_ROLES = (
    NameRole(
        r"\b(?:Orin|Xavier|Tegra|GB10)\b",
        Role.IGPU,
        "Jetson (Orin, Xavier) and GB10 GPUs share the CPU's memory (CUDA types them integrated)",
        "https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/",
    ),
)

# GGML_CUDA_DEVICES=N emulates N devices on the physical ones, round-robin, each with a share of its card's memory:
# "NVIDIA H200 (dev p0/v1)", device id "0000:00:06.0-v1" (ggml-cuda.cu at the pin; seen on an H200, docs/real-runs.md)
VIRTUAL = (
    Virtual(
        r"\(dev p(?P<physical>\d+)/v\d+\)$",
        r"-v\d+$",
        "GGML_CUDA_DEVICES emulates several CUDA devices on one card, each with a share of its memory",
        "https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-cuda/ggml-cuda.cu",
    ),
)

ARCH = ArchOption(
    flag="--sm",
    define="CMAKE_CUDA_ARCHITECTURES",
    owns=("CMAKE_CUDA_ARCHITECTURES",),
    language=NAMES.title,
    example="buildmgr build cuda --sm 86",
    help="CUDA compute capabilities, e.g. 86 or 86,89 or 8.6 or native (default: this host's GPUs)",
    matrix_help="CUDA capabilities of one variant, e.g. 86,89 (repeat for more)",
    resolve=lazy(f"{__name__}.arch", "resolve_arch"),
    ci_label=lazy(f"{__name__}.arch", "ci_label"),
    ci_missing="it has CUDA: name the capabilities with --sm (a CI runner has no GPU to build natively for)",
    from_defines=lazy(f"{__name__}.arch", "sm_from_defines"),
)

# One nvidia-smi call: the columns smi.parse_nvidia_smi_csv reads, then the driver version.
CAPTURE = Capture(
    command=(
        "nvidia-smi",
        "--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version",
        "--format=csv,noheader",
    ),
    option="--nvidia-smi",
    help="with --parse: a captured 'nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv'",
    parse=lazy(f"{__name__}.smi", "parse_nvidia_smi_csv"),
    match=lazy(f"{__name__}.smi", "match_nvidia_smi"),
    host_json=lazy(f"{__name__}.smi", "host_json"),
    wanted=lazy(f"{__name__}.smi", "wanted"),
)

DEVICE_CODE = DeviceCode(
    ".nv_fatbin",
    lazy(f"{__name__}.device_code", "fatbin_codes"),
    lazy(f"{__name__}.device_code", "code_order"),
    "cuda",
    lazy(f"{__name__}.device_code", "host_findings"),
    ("cuda_sass", "cuda_ptx"),
    lazy(f"{__name__}.smi", "visible_capabilities"),
    lazy(f"{__name__}.device_code", "kernel_findings"),
    r"(sm|compute)_[0-9]+[af]?",
)

# --- toolchains from NVIDIA's PyPI wheels (`buildmgr toolchain add cuda`), laid out by kit.py --------------------
# The `cuda-toolkit` meta package pins consistent wheel versions per release; its extras choose the parts.
KITS = (
    Kit(
        "cuda",
        NAME,
        "the CUDA toolkit from NVIDIA's PyPI wheels: nvcc, the runtime, cuBLAS, CCCL, plus a link-time driver stub",
        # measured: nvidia-cuda-nvcc-cu12 12.8.93 ships ptxas and libNVVM, not nvcc
        PipSource(
            "cuda-toolkit",
            ("nvcc", "cudart", "cublas", "cccl", "crt", "nvvm"),
            (13,),
            "13.0",
            "NVIDIA",
            refused={12: "NVIDIA's CUDA 12 wheels have no nvcc (nvidia-cuda-nvcc-cu12 ships ptxas and libNVVM only)"},
        ),
        lazy(f"{__name__}.kit", "lay_out_toolkit"),
        lazy(f"{__name__}.kit", "toolkit_environ"),
        runpath="lib",
        libraries=("libcudart.so", "libcublas.so", "libcublasLt.so"),
        runtime="cuda-runtime",
    ),
    Kit(
        "cuda-runtime",
        NAME,
        "the CUDA runtime and cuBLAS libraries alone, for running builds made with `toolchain add cuda`",
        # a host that runs CUDA programs from Python often has these two wheels already
        PipSource(
            "cuda-toolkit",
            ("cudart", "cublas"),
            (12, 13),
            "13.0",
            "NVIDIA",
            ("nvidia-cuda-runtime", "nvidia-cublas"),
            wheel_suffix="-cu{major}",
            wheel_folder="nvidia",
        ),
        lazy(f"{__name__}.kit", "lay_out_runtime"),
        lazy(f"{__name__}.kit", "toolkit_environ"),
        runpath="lib",
        libraries=("libcudart.so", "libcublas.so", "libcublasLt.so"),
        builds=False,
    ),
)

BACKEND = Backend(
    NAMES,
    order=10,
    min_cmake="3.18",
    gib_per_job=4.0,  # nvcc on ggml-cuda's template instances
    enumeration_env=("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GGML_CUDA_DEVICES"),
    # {major}: the soname's (libcudart.so.13 → 13)
    runtime_libraries={
        "libcuda.so": "the NVIDIA driver",
        "libcudart.so": f"the CUDA {{major}} runtime: NVIDIA's apt cuda-cudart-{{major}}-MINOR, or {_RUNTIME}",
        "libcublas.so": f"cuBLAS {{major}}: NVIDIA's apt libcublas-{{major}}-MINOR, or {_RUNTIME}",
        "libcublasLt.so": f"cuBLAS {{major}}: NVIDIA's apt libcublas-{{major}}-MINOR, or {_RUNTIME}",
        "libnccl.so": "NCCL: apt libnccl2, or pip nvidia-nccl",
    },
    ci=Ci("cuda", runner=("ubuntu-24.04", CI_CONTAINER)),
    driver_library="libcuda.so.1",
    needs_own_build=True,
    locate=lazy(f"{__name__}.preflight", "locate"),
    inspect=lazy(f"{__name__}.preflight", "inspect"),
    why_absent=lazy(f"{__name__}.smi", "why_absent"),
    languages=("CUDA",),
    arch=ARCH,
    capture=CAPTURE,
    device_code=DEVICE_CODE,
    build_failures=BUILD_FAILURES,
    # seen at the pin on 2×H200: no split buffer type; any CUDA device in a -sm tensor set aborts
    splits={"row": "row-split-unsupported", "tensor": "tensor-split-unsupported"},
    engines=lazy(f"{__name__}.engines", "NvmlEngines.open"),
    engines_source="NVML",
    # ggml-cuda page-locks host buffers (CUDA_Host) unless this is set: on a shared host that memory is not swappable
    pinning_guard=("GGML_CUDA_NO_PINNED", "1"),
    log_devices=LOG_DEVICES,
    log_empty=LOG_EMPTY,
    name_roles=NAME_ROLES,
    virtual=VIRTUAL,
    removed_kernels=(NO_FLASH_ATTENTION,),
    other_names=("MUSA",),  # ggml-musa is ggml-cuda's code built for Moore Threads cards
    kits=KITS,
)
