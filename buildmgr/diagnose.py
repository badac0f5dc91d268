"""Known ways a llama.cpp build fails, matched against its log, each with the fix to print above the tail."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: re.Pattern[str]
    fix: str


SIGNATURES = (
    Signature(
        "unsupported-gpu-arch",
        re.compile(r"Unsupported gpu architecture '(compute|sm)_\d+\w*'"),
        "this nvcc cannot build that compute capability: pick another --sm (CUDA 13 builds 75 and newer)",
    ),
    Signature(
        "no-cuda-device-for-native",
        re.compile(r"Unsupported gpu architecture 'compute_No CUDA devices found"),
        "CMake asked for the native CUDA arch on a host without a visible GPU: pass --sm, e.g. --sm 86",
    ),
    Signature(
        "spirv-headers-missing",
        re.compile(r'provided by "SPIRV-Headers"|SPIRV-Headers_DIR-NOTFOUND'),
        "the SPIRV-Headers CMake package is missing: apt-get install spirv-headers, or set VULKAN_SDK",
    ),
    Signature(
        "vulkan-headers-too-old",
        re.compile(r"LayerSettingEXT|VK_EXT_LAYER_SETTINGS"),
        "the Vulkan headers are too old for this llama.cpp (>= 1.3.272 needed; Debian 12 has 1.3.239): "
        "install the LunarG SDK or newer libvulkan-dev headers and set VULKAN_SDK",
    ),
    Signature(
        "glslc-missing",
        re.compile(r"Could NOT find Vulkan \(missing:.*glslc|Vulkan_GLSLC_EXECUTABLE-NOTFOUND"),
        "glslc is missing: apt-get install glslc (or install the LunarG Vulkan SDK)",
    ),
    Signature(
        "unsupported-host-compiler",
        re.compile(r"unsupported GNU version|unsupported (clang|Microsoft Visual Studio) version"),
        "nvcc does not support this host compiler: install a supported gcc and set CUDAHOSTCXX=/usr/bin/g++-N",
    ),
    Signature(
        "cuda-driver-library-missing",
        re.compile(r"CUDA::cuda_driver\s+but the target was not found"),
        "the CUDA driver library (libcuda.so) is missing: install the NVIDIA driver or the toolkit's "
        "lib64/stubs/libcuda.so, or build without it: -D GGML_CUDA_NO_VMM=ON",
    ),
    Signature(
        "out-of-memory",
        re.compile(
            r"Killed signal terminated program|fatal error: Killed|virtual memory exhausted|cannot allocate memory",
            re.IGNORECASE,
        ),
        "the compiler was killed, most likely out of memory: build again with fewer jobs, e.g. --jobs 1",
    ),
)


def diagnose(text: str) -> list[str]:
    """Fixes for every known signature found in a log, in table order."""
    return [f"{s.name}: {s.fix}" for s in SIGNATURES if s.pattern.search(text)]
