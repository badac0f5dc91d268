"""Vulkan headers and SPIRV-Headers from a newer release of this host's distribution, laid out as a VULKAN_SDK."""

from __future__ import annotations

from pathlib import Path

from packaging.version import Version

from buildmgr.backends.vulkan import MIN_HEADERS
from buildmgr.backends.vulkan.preflight import parse_header_version
from buildmgr.core.errors import UserError


def lay_out_headers(fetched: Path, root: Path, cc: str | None) -> str:
    (fetched / "usr").rename(root / "usr")
    header = root / "usr/include/vulkan/vulkan_core.h"
    version = parse_header_version(header.read_text(errors="replace")) if header.is_file() else None
    if version is None or version < Version(MIN_HEADERS):
        raise UserError(f"the downloaded Vulkan headers are {version or 'missing'}, and >= {MIN_HEADERS} are needed")
    return str(version)


def headers_environ(root: Path) -> dict[str, str]:
    return {"VULKAN_SDK": str(root / "usr")}
