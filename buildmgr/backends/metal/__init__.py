"""Metal: Apple GPUs, macOS only."""

from __future__ import annotations

from buildmgr.backend_spec import Backend, Host, LogDevice, NameRole, Names, Report, Virtual
from buildmgr.core.device_records import Role
from buildmgr.core.findings import Check

NAMES = Names("Metal", "metal", "Metal", "GGML_METAL", "ggml-metal")


def inspect(host: Host, found: object, deep: bool) -> Report:
    on_mac = host.system == "Darwin"
    return Report(
        (
            Check(
                NAMES.device, "macOS", on_mac, host.system, "Metal builds only on macOS with Xcode's command line tools"
            ),
        )
    )


# ggml-metal's start-up block (ggml-metal-device.m at the pin): "ggml_metal_device_init: GPU name:   MTL0 (Apple M1
# Max)" ("MTL0" alone before April 2026), then "has unified memory    = true" and "recommendedMaxWorkingSetSize  =
# 51539.61 MB" (its memory total); before 2025 "ggml_metal_init: GPU name:   Apple M1 Max", "hasUnifiedMemory = true"
# and the working set in MiB, the device named Metal.
_UNIFIED = ("uma", "true", Role.IGPU, "Metal says the GPU has unified memory (it shares the SoC's)")
_MORE = (
    r"ggml_metal\w*: (?:has unified memory|hasUnifiedMemory)\s*=\s*(?P<uma>true|false)",
    r"ggml_metal\w*: recommendedMaxWorkingSetSize\s*=\s*(?:(?P<total_mb>[\d.]+) MB|(?P<total_mib>[\d.]+) MiB)",
)
LOG_DEVICES = (
    LogDevice(
        "ggml_metal lines",
        r"ggml_metal\w*: GPU name:\s+(?P<backend>MTL)(?P<index>\d+)(?: \((?P<description>.+)\))?\s*$",
        NAMES.device,
        role=_UNIFIED,
        more=_MORE,
        formats=(r"%s: GPU name:   %s (%s)\n",),
    ),
    LogDevice(
        "ggml_metal lines",
        r"ggml_metal\w*: GPU name:\s+(?!MTL\d)(?P<description>\S.*?)\s*$",
        NAMES.device,
        role=_UNIFIED,
        more=_MORE,
    ),
)

BACKEND = Backend(
    NAMES,
    order=50,
    enumeration_env=("GGML_METAL_DEVICES",),
    systems=("macos",),  # Metal and Foundation come with macOS: no run-time library to name
    inspect=inspect,
    log_devices=LOG_DEVICES,
    # GGML_METAL_DEVICES emulates several devices on one GPU: "Apple M2 Max (dev p0/v1)"
    virtual=(
        Virtual(
            r"\(dev p(?P<physical>\d+)/v\d+\)$",
            None,
            "GGML_METAL_DEVICES emulates several Metal devices on one GPU",
            "https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-metal/ggml-metal-device.m",
        ),
    ),
    other_names=("MTL",),
    # Apple silicon's GPU shares the SoC's memory (Metal, and MoltenVK under Vulkan, name it after the chip).
    name_roles=(
        NameRole(
            r"\bApple M\d",
            Role.IGPU,
            "Apple M-series GPUs are part of the SoC and share its unified memory",
            "https://developer.apple.com/documentation/metal/choosing-a-resource-storage-mode-for-apple-gpus",
        ),
    ),
)
