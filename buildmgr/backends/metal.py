"""Metal: Apple GPUs, macOS only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from buildmgr.backends.base import Extras, Host, NameRole, Nothing, Report
from buildmgr.findings import Check

if TYPE_CHECKING:
    from buildmgr.devices import Captures

NAME = "Metal"
GGML_TARGET = "ggml-metal"
MIN_CMAKE = "3.14"
GIB_PER_JOB = 2.0
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = ("GGML_METAL_DEVICES",)
RUNTIME_LIBRARIES: dict[str, str] = {}  # Metal and Foundation come with macOS
# Where the artifacts workflow can build it, and the provisioning step it needs ("" none).
SYSTEMS = ("macos",)
CI_SETUP = ""
DRIVER_LIBRARY = ""
# Apple silicon's GPU shares the SoC's memory (Metal, and MoltenVK under Vulkan, name it after the chip).
NAME_ROLES = (
    NameRole(
        r"\bApple M\d",
        "igpu",
        "Apple M-series GPUs are part of the SoC and share its unified memory",
        "https://developer.apple.com/documentation/metal/choosing-a-resource-storage-mode-for-apple-gpus",
    ),
)
EXTRAS = Extras(name_roles=NAME_ROLES)  # no arch option, vendor tool, GPU code or known failures of its own


def locate(host: Host) -> Nothing:
    return Nothing()


def inspect(host: Host, found: Nothing, deep: bool) -> Report:
    on_mac = host.system == "Darwin"
    return Report(
        (Check(NAME, "macOS", on_mac, host.system, "Metal builds only on macOS with Xcode's command line tools"),)
    )


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    return "no device found"
