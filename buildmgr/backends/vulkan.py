"""Vulkan: headers new enough for ggml-vulkan, glslc, the loader and the SPIRV-Headers CMake package; vulkaninfo's
view of the GPUs (device types, UUIDs).

`VULKAN_SDK` points at an SDK (or any prefix with include/vulkan and share/cmake/SPIRV-Headers, such
as a folder where newer Debian header packages were unpacked); anything it lacks is looked for on the system.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from packaging.version import Version

from buildmgr.backends import base
from buildmgr.backends.base import Capture, Extras, Host, Report, one_to_one, which
from buildmgr.errors import UserError
from buildmgr.findings import Check, Signature

if TYPE_CHECKING:
    from buildmgr.devices import Captures, Device

NAME = "Vulkan"
GGML_TARGET = "ggml-vulkan"
MIN_CMAKE = "3.19"
GIB_PER_JOB = 3.0  # ggml-vulkan.cpp and the generated shader sources are large
SHADER_COMPILER = "Vulkan_GLSLC_EXECUTABLE"  # the host define; the shader cache wraps it
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = ("GGML_VK_VISIBLE_DEVICES", "VK_DRIVER_FILES", "VK_ICD_FILENAMES")
# Libraries the built files may need from the host (soname stem → where it comes from).
RUNTIME_LIBRARIES = {
    "libvulkan.so": "the Vulkan loader: apt libvulkan1, plus a driver (mesa-vulkan-drivers or the GPU vendor's)"
}
# Where the artifacts workflow can build it, and the provisioning step it needs ("" none).
SYSTEMS = ("linux",)
CI_SETUP = "vulkan"
DRIVER_LIBRARY = ""
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
# "ggml_vulkan: 0 = AMD Radeon Graphics (RADV GFX1151) (radv) | uma: 1 | …" (ggml-vulkan's device line: name, then the
# driver in parentheses; uma is deviceType == eIntegratedGpu), and the 2024 form "Vulkan0: NAME (DRIVER) | uma: 0 | …".
_UMA = ("uma", "1", "igpu", "its ggml_vulkan line says uma: 1 (Vulkan's integrated-GPU device type)")
LOG_DEVICES = (
    base.LogDevice(
        "ggml_vulkan lines",
        r"ggml_vulkan: (?P<index>\d+) = (?P<description>.+?)\s*(?:\| uma: (?P<uma>\d).*)?$",
        NAME,
        role=_UMA,
        wrapped=r"(?:^\s*|\| )uma: \d",
    ),
    base.LogDevice(
        "ggml_vulkan lines",
        r"(?<![\w-])Vulkan(?P<index>\d+): (?P<description>.+?)\s*\| uma: (?P<uma>\d)",
        NAME,
        role=_UMA,
    ),
)
LOG_EMPTY = (r"ggml_vulkan: No devices found\.",)
# Software rasterizers, which Vulkan types as CPUs; the Direct3D one appears through Dozen.
NAME_ROLES = (
    base.NameRole(
        r"\bllvmpipe\b",
        "cpu",
        "llvmpipe (Mesa's lavapipe) is a CPU rasterizer",
        "https://docs.mesa3d.org/drivers/llvmpipe.html",
    ),
    base.NameRole(
        r"\bSwiftShader\b",
        "cpu",
        "SwiftShader is a CPU implementation of Vulkan",
        "https://github.com/google/swiftshader",
    ),
    base.NameRole(
        r"Microsoft Basic Render Driver",
        "cpu",
        "the Microsoft Basic Render Driver is WARP, Direct3D's CPU rasterizer",
        "https://learn.microsoft.com/windows/win32/direct3darticles/directx-warp",
    ),
)
# Dozen (Mesa's Vulkan on Direct3D 12, Windows and WSL) names the card it runs on: "Microsoft Direct3D12 (NAME)".
LAYERED = (
    base.Layered(
        r"^Microsoft Direct3D12 \((?P<card>.+?)\)(?: \(Dozen\))?$",
        "Dozen is Vulkan on Direct3D 12, run by the card it names",
        "https://docs.mesa3d.org/drivers/dozen.html",
    ),
)
# Seen at the pin on 2×H200: no split buffer type; Vulkan-only -sm tensor sets ran.
SPLITS: dict[str, str | None] = {"row": "row-split-unsupported", "tensor": None}
# ggml-vulkan uses vk::LayerSettingEXT, public since 1.3.272; measured: 1.3.239 fails, 1.4.309 works.
MIN_HEADERS = Version("1.3.272")
HEADERS_FIX = (
    "Vulkan headers >= 1.3.272 are needed (Debian 12's libvulkan-dev is 1.3.239): buildmgr toolchain add vulkan "
    "(a newer release's header packages), or install the LunarG SDK and set VULKAN_SDK"
)


def parse_header_version(text: str) -> Version | None:
    """vulkan_core.h → 1.MINOR.PATCH from VK_HEADER_VERSION_COMPLETE and VK_HEADER_VERSION."""
    patch = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", text)
    complete = re.search(
        r"#define\s+VK_HEADER_VERSION_COMPLETE\s+VK_MAKE_API_VERSION\(\s*\d+\s*,\s*(\d+)\s*,\s*(\d+)", text
    )
    if not patch:
        return None
    major, minor = (complete.group(1), complete.group(2)) if complete else ("1", "3")
    return Version(f"{major}.{minor}.{patch.group(1)}")


def _roots(environ: Mapping[str, str]) -> list[Path]:
    sdk = environ.get("VULKAN_SDK")
    return ([Path(sdk)] if sdk else []) + [Path("/usr"), Path("/usr/local")]


def _first(patterns: list[str]) -> str | None:
    for pattern in patterns:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[0]
    return None


class Sdk(NamedTuple):
    """The Vulkan files found here: VULKAN_SDK first, then the system prefixes. Only read, never run, so none of
    them keeps a remembered answer (`inputs` is empty)."""

    header: str | None
    glslc: str | None
    loader: str | None
    spirv: str | None

    @property
    def inputs(self) -> tuple[str, ...]:
        return ()


def locate(host: Host) -> Sdk:
    roots = _roots(host.environ)
    arch_dirs = [f"{r}/lib/*-linux-gnu" for r in roots] + [f"{r}/lib" for r in roots] + [f"{r}/lib64" for r in roots]
    loader = _first([f"{d}/libvulkan.so" for d in arch_dirs] + [f"{d}/libvulkan.so.1" for d in arch_dirs])
    loader = loader if loader and os.path.exists(loader) else _first([f"{d}/libvulkan.so.1" for d in arch_dirs])
    spirv = _first(
        [
            f"{r}/{sub}/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake"
            for r in roots
            for sub in ("share", "lib", "lib/*-linux-gnu", "lib64")
        ]
    )
    return Sdk(
        header=_first([str(r / "include/vulkan/vulkan_core.h") for r in roots]),
        glslc=which("glslc", *(str(r / "bin") for r in roots[:1])),
        loader=loader,
        spirv=spirv,
    )


def inspect(host: Host, found: Sdk, deep: bool) -> Report:
    checks: list[Check] = []
    defines: dict[str, str] = {}
    versions: dict[str, str] = {}

    header = found.header
    version = parse_header_version(Path(header).read_text(errors="replace")) if header else None
    if version is None:
        checks.append(Check(NAME, "Vulkan headers", False, "not found", HEADERS_FIX))
    else:
        include = str(Path(header).parent.parent)
        ok = version >= MIN_HEADERS
        checks.append(Check(NAME, "Vulkan headers", ok, f"{version} in {include}", HEADERS_FIX))
        defines["Vulkan_INCLUDE_DIR"] = include
        versions["vulkan-headers"] = str(version)

    glslc = found.glslc
    checks.append(
        Check(
            NAME,
            "glslc",
            glslc is not None,
            glslc or "not found",
            "apt-get install glslc (or install the LunarG Vulkan SDK)",
        )
    )
    if glslc:
        defines[SHADER_COMPILER] = glslc

    loader = found.loader
    checks.append(Check(NAME, "Vulkan loader", loader is not None, loader or "not found", "apt-get install libvulkan1"))
    if loader:
        defines["Vulkan_LIBRARY"] = loader

    spirv = found.spirv
    checks.append(
        Check(
            NAME,
            "SPIRV-Headers CMake package",
            spirv is not None,
            spirv or "not found",
            "buildmgr toolchain add vulkan, or apt-get install spirv-headers (1.3.239's works)",
        )
    )
    if spirv:
        defines["SPIRV-Headers_DIR"] = str(Path(spirv).parent)
    return Report(tuple(checks), defines, versions)


# --- the headers from a newer release of this host's distribution (`buildmgr toolchain add vulkan`) ---------------
# Header-only packages: nothing in them runs, so a newer release's are safe on an older host. glslc is a program
# (Debian 13's needs glibc >= 2.38 and does not start on Debian 12): it stays the host's own, from its own release.


def _lay_out_headers(fetched: Path, root: Path, cc: str | None) -> str:
    (fetched / "usr").rename(root / "usr")
    header = root / "usr/include/vulkan/vulkan_core.h"
    version = parse_header_version(header.read_text(errors="replace")) if header.is_file() else None
    if version is None or version < MIN_HEADERS:
        raise UserError(f"the downloaded Vulkan headers are {version or 'missing'}, and >= {MIN_HEADERS} are needed")
    return str(version)


KITS = (
    base.Kit(
        "vulkan",
        NAME,
        "Vulkan headers and SPIRV-Headers from a newer release of this host's distribution (header-only packages)",
        base.AptSource(
            ("libvulkan-dev", "spirv-headers"),
            {"bookworm": "trixie", "trixie": "trixie", "jammy": "noble", "noble": "noble"},
            {
                "debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
                "ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg",
            },
            {"debian": "main", "ubuntu": "main universe"},
            "install the LunarG Vulkan SDK and set VULKAN_SDK",
        ),
        _lay_out_headers,
        lambda root: {"VULKAN_SDK": str(root / "usr")},
    ),
)


# --- vulkaninfo's view of the GPUs ----------------------------------------------------------------------------------


class VulkanGpu(NamedTuple):
    index: int
    name: str
    type: str  # gpu | igpu | cpu | unknown
    uuid: str | None


_VK_TYPES = {
    "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU": "gpu",
    "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU": "igpu",
    "PHYSICAL_DEVICE_TYPE_CPU": "cpu",
    "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU": "gpu",
}
SKIPPED = "not run: ggml gave every Vulkan device a PCI id"


def parse_vulkaninfo_summary(text: str) -> list[VulkanGpu]:
    """`vulkaninfo --summary` → one record per GPUn block."""
    gpus: list[VulkanGpu] = []
    blocks = re.split(r"^GPU(\d+):\s*$", text, flags=re.MULTILINE)
    for number, body in zip(blocks[1::2], blocks[2::2], strict=False):
        fields = dict(re.findall(r"^\s*(\w+)\s*=\s*(.*?)\s*$", body, flags=re.MULTILINE))
        uuid = fields.get("deviceUUID")
        gpus.append(
            VulkanGpu(
                int(number),
                fields.get("deviceName", ""),
                _VK_TYPES.get(fields.get("deviceType", ""), "unknown"),
                uuid.lower() if uuid else None,
            )
        )
    return gpus


def vulkaninfo_needed(builds: Sequence[tuple[tuple[str, ...], tuple[Device, ...]]]) -> bool:
    """vulkaninfo (slow: it starts every Vulkan driver) only adds what ggml cannot say: a Vulkan device without a
    PCI id (a CPU driver such as lavapipe), or why a Vulkan build sees no device at all."""
    for built, devices in builds:
        if NAME in built:
            mine = [d for d in devices if d.backend == NAME]
            if not mine or any(d.pci_bus_id is None for d in mine):
                return True
    return False


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    vulkan = captures.get(NAME, [])
    if environ.get("GGML_VK_VISIBLE_DEVICES") == "":
        return "GGML_VK_VISIBLE_DEVICES is set and empty, which hides every Vulkan device"
    if vulkan and all(g.type == "cpu" for g in vulkan):
        names = ", ".join(g.name for g in vulkan)
        return (
            f"the only Vulkan driver here is CPU-type ({names}), which llama.cpp skips "
            "unless GGML_VK_VISIBLE_DEVICES names it (e.g. GGML_VK_VISIBLE_DEVICES=0)"
        )
    if not vulkan:
        return "vulkaninfo found no Vulkan device (no ICD driver, or VK_DRIVER_FILES points elsewhere)"
    return "no device found"


def match_vulkaninfo(devices: list[Device], vulkan: list[VulkanGpu], notes: list[str]) -> list[Device]:
    """vulkaninfo's UUID and device type for the Vulkan devices: by UUID, else by name where one to one. Its type
    settles what ggml cannot: a CPU driver (lavapipe) that ggml calls a GPU is a CPU, said in `notes`."""
    from buildmgr.devices import RoleBasis

    mine = [d for d in devices if d.backend == NAME]
    by_uuid = {g.uuid: g for g in vulkan if g.uuid}
    by_name = one_to_one([d for d in mine if d.uuid is None], vulkan, lambda d, g: g.name == d.description)
    matched = []
    for device in devices:
        gpu = (
            (by_uuid.get(device.uuid) if device.uuid else by_name.get(device.name)) if device.backend == NAME else None
        )
        if gpu is not None:
            role = _role(device, gpu.type, notes)
            told = (
                {"role_basis": RoleBasis.TOOL.value, "role_reason": f"vulkaninfo types it {gpu.type}"}
                if role != device.type
                else {}
            )
            device = dataclasses.replace(device, uuid=gpu.uuid, type=role, **told)
        matched.append(device)
    return matched


def _role(device: Device, driver_type: str, notes: list[str]) -> str:
    if driver_type == "cpu" and device.type != "cpu":
        notes.append(
            f"{device.name}: ggml reports {device.ggml_type or 'no type'}, but vulkaninfo says it is a CPU driver"
        )
        return "cpu"
    return device.type if device.type != "unknown" else driver_type


CAPTURE = Capture(
    command=("vulkaninfo", "--summary"),
    option="--vulkaninfo",
    help="with --parse: a captured 'vulkaninfo --summary'",
    parse=parse_vulkaninfo_summary,
    match=match_vulkaninfo,
    host_json=lambda gpus: {
        "drivers": {"vulkan_devices": [g._asdict() for g in gpus] if gpus is not None else SKIPPED}
    },
    wanted=vulkaninfo_needed,
)


EXTRAS = Extras(
    shader_compiler=SHADER_COMPILER,
    capture=CAPTURE,
    build_failures=BUILD_FAILURES,
    log_devices=LOG_DEVICES,
    log_empty=LOG_EMPTY,
    name_roles=NAME_ROLES,
    layered=LAYERED,
    splits=SPLITS,
    ci_runner=("ubuntu-24.04", ""),  # its Vulkan headers (1.3.275) are the first distro ones new enough
    kits=KITS,
)
