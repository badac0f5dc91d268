"""What a Vulkan build needs here: headers new enough for ggml-vulkan, glslc, the loader and the SPIRV-Headers CMake
package, from VULKAN_SDK first, then the system prefixes (only read, never run)."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from packaging.version import Version

from buildmgr.backend_spec import Host, Report
from buildmgr.backends.vulkan import HEADERS_FIX, MIN_HEADERS, NAME, SHADER_COMPILER
from buildmgr.core import proc
from buildmgr.core.findings import Check


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
        glslc=proc.which("glslc", host.environ, *(str(r / "bin") for r in roots[:1])),
        loader=loader,
        spirv=spirv,
    )


def inspect(host: Host, found: Sdk, deep: bool) -> Report:
    checks: list[Check] = []
    defines: dict[str, str] = {}
    versions: dict[str, str] = {}

    header = found.header
    version = parse_header_version(Path(header).read_text(errors="replace")) if header else None
    if header is None or version is None:
        checks.append(Check(NAME, "Vulkan headers", False, "not found", HEADERS_FIX))
    else:
        include = str(Path(header).parent.parent)
        ok = version >= Version(MIN_HEADERS)
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
