"""Metal: Apple GPUs, macOS only."""

from __future__ import annotations

from buildmgr.backend import Backend, Host, NameRole, Names, Report
from buildmgr.devices import Role
from buildmgr.findings import Check

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


BACKEND = Backend(
    NAMES,
    order=50,
    enumeration_env=("GGML_METAL_DEVICES",),
    systems=("macos",),  # Metal and Foundation come with macOS: no run-time library to name
    inspect=inspect,
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
