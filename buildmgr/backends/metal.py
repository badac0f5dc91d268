"""Metal: Apple GPUs, macOS only."""

from __future__ import annotations

from buildmgr.backends import Check, Host, Report

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
ARCH = None


def inspect(host: Host, deep: bool) -> Report:
    on_mac = host.system == "Darwin"
    return Report(
        (Check(NAME, "macOS", on_mac, host.system, "Metal builds only on macOS with Xcode's command line tools"),)
    )


def why_absent(environ: dict[str, str], vulkan: list, nvidia: list) -> str | None:
    return "no device found"
