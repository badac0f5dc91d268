"""Vulkan: any Vulkan GPU (NVIDIA, AMD, Intel, Mesa's lavapipe on the CPU). What is known about it, as data; what it
does is in this package's modules (`preflight`: headers new enough for ggml-vulkan, glslc, the loader and the
SPIRV-Headers CMake package; `info`: vulkaninfo's view of the GPUs, with device types and UUIDs; `kit`: headers from a
newer release of this host's distribution), each imported when first used.

`VULKAN_SDK` points at an SDK (or any prefix with include/vulkan and share/cmake/SPIRV-Headers, such
as a folder where newer Debian header packages were unpacked); anything it lacks is looked for on the system.
"""

from __future__ import annotations

from buildmgr.backend_spec import Backend, Capture, Ci, Layered, LogDevice, NameRole, Names, ShaderCache, lazy
from buildmgr.core.device_records import Role
from buildmgr.core.findings import Signature
from buildmgr.tools.kit_spec import AptSource, Kit

NAMES = Names("Vulkan", "vulkan", "Vulkan", "GGML_VULKAN", "ggml-vulkan")
NAME = NAMES.device
SHADER_COMPILER = "Vulkan_GLSLC_EXECUTABLE"  # the host define; the shader cache wraps it
# ggml-vulkan uses vk::LayerSettingEXT, public since 1.3.272; measured: 1.3.239 fails, 1.4.309 works.
MIN_HEADERS = "1.3.272"
HEADERS_FIX = (
    "Vulkan headers >= 1.3.272 are needed (Debian 12's libvulkan-dev is 1.3.239): buildmgr toolchain add vulkan "
    "(a newer release's header packages), or install the LunarG SDK and set VULKAN_SDK"
)
BUILD_FAILURES = (
    Signature(
        "spirv-headers-missing",
        r'provided by "SPIRV-Headers"|SPIRV-Headers_DIR-NOTFOUND',
        "the SPIRV-Headers CMake package is missing: buildmgr toolchain add vulkan, or apt-get install spirv-headers",
    ),
    Signature(
        "vulkan-headers-too-old",
        r"LayerSettingEXT|VK_EXT_LAYER_SETTINGS",
        "the Vulkan headers are too old for this llama.cpp (>= 1.3.272 needed; Debian 12 has 1.3.239): "
        "install the LunarG SDK or newer libvulkan-dev headers and set VULKAN_SDK",
    ),
    Signature(
        "glslc-missing",
        r"Could NOT find Vulkan \(missing:.*glslc|Vulkan_GLSLC_EXECUTABLE-NOTFOUND",
        "glslc is missing: apt-get install glslc (or install the LunarG Vulkan SDK)",
    ),
)
# "ggml_vulkan: 0 = AMD Radeon Graphics (RADV GFX1151) (radv) | uma: 1 | …" (ggml-vulkan's `%zu = %s (%s) | uma:`: the
# deviceName, which is ggml's own description, then the driverName in parentheses, the last group before `| uma:`;
# uma is deviceType == eIntegratedGpu), from 2024-11 (build 4090). Before it, 2024's `VulkanN: NAME (DRIVER) | uma:`,
# whose driver group began at build 3135 (73bac2b, 2024-06-11; the form at 2090, ee1628b, and on its pull request's
# branch before that), and January 2024's `ggml_vulkan: Using NAME | [uma: U | ]fp16: …`, one device, no index and no
# driver (from 1996, 2307523: the first build with a Vulkan backend; a smaller number is no commit count of a build
# that printed any of these).
_UMA = ("uma", "1", Role.IGPU, "its ggml_vulkan line says uma: 1 (Vulkan's integrated-GPU device type)")
_SEPARATE = (
    "uma",
    "0",
    "its ggml_vulkan line says uma: 0 (not Vulkan's integrated-GPU type), and its name is no CPU's",
)
_DRIVER = r"(?: \((?P<driver>[^()]*)\))?"  # the driver's name holds no parenthesis; the device's may
LOG_DEVICES = (
    LogDevice(
        "ggml_vulkan lines",
        # the format prints the driver group after every name: a line quoted without its `| uma: …` tail (cut at
        # the field's ` | `) still ends in it
        r"ggml_vulkan: (?P<index>\d+) = (?P<description>.+?)" + _DRIVER + r"\s*(?:\| uma: (?P<uma>\d).*|\|.*)?$",
        NAME,
        role=_UMA,
        wrapped=r"(?:^\s*|\| )uma: \d",
        separate=_SEPARATE,
        header=r"ggml_vulkan: Found \d+ Vulkan devices:",
        starts=r"ggml_vulkan: Found \d+ Vulkan devices:",
        formats=(
            r"ggml_vulkan: %zu = %s (%s) | uma: %d | fp16: %s | bf16: %d | fp4: %d | warp size: %zu | shared memory: %d"
            r" | int dot: %d | matrix cores: %s\n",
            r"ggml_vulkan: Found %zu Vulkan devices:\n",
        ),
    ),
    LogDevice(
        "ggml_vulkan lines",
        r"(?<![\w-])Vulkan(?P<index>\d+): (?P<description>.+?)" + _DRIVER + r"\s*\| uma: (?P<uma>\d)",
        NAME,
        role=_UMA,
        separate=_SEPARATE,
        driver_since=(1996, 3135),
    ),
    LogDevice(
        "ggml_vulkan lines",
        r"ggml_vulkan: Using (?P<description>[^|]+?)\s*(?:\|(?: uma: (?P<uma>\d) \|)?.*)?$",
        NAME,
        role=_UMA,
        separate=_SEPARATE,
    ),
)
LOG_EMPTY = (r"ggml_vulkan: No devices found\.",)
# Software rasterizers, which Vulkan types as CPUs; the Direct3D one appears through Dozen.
NAME_ROLES = (
    NameRole(
        r"\bllvmpipe\b",
        Role.CPU,
        "llvmpipe (Mesa's lavapipe) is a CPU rasterizer",
        "https://docs.mesa3d.org/drivers/llvmpipe.html",
    ),
    NameRole(
        r"\bSwiftShader\b",
        Role.CPU,
        "SwiftShader is a CPU implementation of Vulkan",
        "https://github.com/google/swiftshader",
    ),
    NameRole(
        r"Microsoft Basic Render Driver",
        Role.CPU,
        "the Microsoft Basic Render Driver is WARP, Direct3D's CPU rasterizer",
        "https://learn.microsoft.com/windows/win32/direct3darticles/directx-warp",
    ),
)
# Dozen (Mesa's Vulkan on Direct3D 12, Windows and WSL) names the card it runs on: "Microsoft Direct3D12 (NAME)", its
# driver `Dozen` apart (a description read whole, from a line cut short, may still end in it).
LAYERED = (
    Layered(
        r"^Microsoft Direct3D12 \((?P<card>.+?)\)(?: \(Dozen\))?$",
        "Dozen is Vulkan on Direct3D 12, run by the card it names",
        "https://docs.mesa3d.org/drivers/dozen.html",
    ),
)

CAPTURE = Capture(
    command=("vulkaninfo", "--summary"),
    option="--vulkaninfo",
    help="with --parse: a captured 'vulkaninfo --summary'",
    parse=lazy(f"{__name__}.info", "parse_vulkaninfo_summary"),
    match=lazy(f"{__name__}.info", "match_vulkaninfo"),
    host_json=lazy(f"{__name__}.info", "host_json"),
    wanted=lazy(f"{__name__}.info", "vulkaninfo_needed"),
)

# The headers from a newer release of this host's distribution (`buildmgr toolchain add vulkan`): header-only
# packages, so nothing in them runs, and a newer release's are safe on an older host. glslc is a program (Debian 13's
# needs glibc >= 2.38 and does not start on Debian 12): it stays the host's own, from its own release.
KITS = (
    Kit(
        "vulkan",
        NAME,
        "Vulkan headers and SPIRV-Headers from a newer release of this host's distribution (header-only packages)",
        AptSource(
            ("libvulkan-dev", "spirv-headers"),
            {"bookworm": "trixie", "trixie": "trixie", "jammy": "noble", "noble": "noble"},
            {
                "debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
                "ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
            },
            {"debian": "main", "ubuntu": "main universe"},
            "install the LunarG Vulkan SDK and set VULKAN_SDK",
        ),
        lazy(f"{__name__}.kit", "lay_out_headers"),
        lazy(f"{__name__}.kit", "headers_environ"),
    ),
)

BACKEND = Backend(
    NAMES,
    order=20,
    min_cmake="3.19",
    gib_per_job=3.0,  # ggml-vulkan.cpp and the generated shader sources are large
    enumeration_env=("GGML_VK_VISIBLE_DEVICES", "VK_DRIVER_FILES", "VK_ICD_FILENAMES"),
    runtime_libraries={
        "libvulkan.so": "the Vulkan loader: apt libvulkan1, plus a driver (mesa-vulkan-drivers or the GPU vendor's)"
    },
    # ubuntu-24.04's Vulkan headers (1.3.275) are the first distro ones new enough
    ci=Ci("vulkan", apt=("libvulkan-dev", "glslc", "spirv-headers"), runner=("ubuntu-24.04", "")),
    locate=lazy(f"{__name__}.preflight", "locate"),
    inspect=lazy(f"{__name__}.preflight", "inspect"),
    why_absent=lazy(f"{__name__}.info", "why_absent"),
    shader_cache=ShaderCache(
        SHADER_COMPILER,
        lazy(f"{__name__}.glslc_cache", "launcher"),
        lazy(f"{__name__}.glslc_cache", "environ"),
        lazy(f"{__name__}.glslc_cache", "counts"),
        lazy(f"{__name__}.glslc_cache", "prune"),
    ),
    capture=CAPTURE,
    build_failures=BUILD_FAILURES,
    # seen at the pin on 2×H200: no split buffer type; Vulkan-only -sm tensor sets ran
    splits={"row": "row-split-unsupported", "tensor": None},
    log_devices=LOG_DEVICES,
    log_empty=LOG_EMPTY,
    name_roles=NAME_ROLES,
    layered=LAYERED,
    kits=KITS,
)
