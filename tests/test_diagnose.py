"""Each known failure, matched on lines taken from real runs (sources in the comments)."""

import pytest

from buildmgr.proof.diagnose import diagnose

# name → lines as real tools printed them
REAL_LINES = {
    # nvcc 13.0 here: nvcc -arch=sm_50 -c k.cu
    "unsupported-gpu-arch": "nvcc fatal   : Unsupported gpu architecture 'sm_50'",
    # nvcc 13.0 here, given what CMake's native detection yields on a host with no GPU (llama.cpp issue 18430)
    "no-cuda-device-for-native": "nvcc fatal   : Unsupported gpu architecture 'compute_No CUDA devices found.'",
    # cmake -DGGML_VULKAN=ON on the pinned source without the SPIRV-Headers package, here
    "spirv-headers-missing": """CMake Error at ggml/src/ggml-vulkan/CMakeLists.txt:14 (find_package):
  Could not find a package configuration file provided by "SPIRV-Headers"
  with any of the following names:""",
    # g++ on ggml-vulkan.cpp with Debian 12's 1.3.239 headers (SPEC: fails on vk::LayerSettingEXT)
    "vulkan-headers-too-old": "ggml-vulkan.cpp:5214:22: error: 'LayerSettingEXT' is not a member of 'vk'",
    # cmake -DGGML_VULKAN=ON here with glslc hidden from PATH
    "glslc-missing": """CMake Error at .../FindPackageHandleStandardArgs.cmake:290 (message):
  Could NOT find Vulkan (missing: glslc) (found version "1.4.309")""",
    # CUDA 13.0's crt/host_config.h line 137
    "unsupported-host-compiler": "#error -- unsupported GNU version! gcc versions later than 15 are not supported! "
    "The nvcc flag '-allow-unsupported-compiler' can be used to override this version check",
    # buildmgr build cuda --sm 75 --configure-only here, with a toolkit of NVIDIA's PyPI wheels (no stubs/)
    "cuda-driver-library-missing": """CMake Error at ggml/src/ggml-cuda/CMakeLists.txt:184 (target_link_libraries):
  Target "ggml-cuda" links to:

    CUDA::cuda_driver

  but the target was not found.  Possible reasons include:""",
    # g++ when the OOM killer ends cc1plus
    "out-of-memory": "c++: fatal error: Killed signal terminated program cc1plus",
}


def test_every_known_failure_has_a_real_line():
    """A signature added without the line it was seen in fails here: every one is matched on a real one above."""
    from buildmgr.proof.diagnose import signatures

    assert {s.name for s in signatures()} == set(REAL_LINES)


@pytest.mark.parametrize("name", REAL_LINES)
def test_each_signature_matches_only_its_own_failure(name):
    found = diagnose(REAL_LINES[name])
    assert [f.split(":")[0] for f in found] == [name]


def test_a_successful_configure_log_matches_nothing():
    text = """-- Using CMAKE_CUDA_ARCHITECTURES=86 CMAKE_CUDA_ARCHITECTURES_NATIVE=No CUDA devices found.-real
-- Found Vulkan: /usr/lib/x86_64-linux-gnu/libvulkan.so.1 (found version "1.4.309") found components: glslc
$ cmake -S src -B b -DSPIRV-Headers_DIR=/x/share/cmake/SPIRV-Headers -DVulkan_GLSLC_EXECUTABLE=/usr/bin/glslc"""
    assert diagnose(text) == []
