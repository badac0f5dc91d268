"""The GPU code in a HIP build (the gfx code objects in `.hip_fatbin`, which do not JIT), this host's AMD GPUs as the
kernel's amdkfd lists them, and why a HIP build sees no device here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.backends.hip import NAMES, gfx_key
from buildmgr.core import proc
from buildmgr.core.engines import read_file
from buildmgr.core.findings import Finding, Severity

if TYPE_CHECKING:
    from buildmgr.core.device_records import Captures

_HIP_TARGET = re.compile(rb"amdgcn-amd-amdhsa--(gfx[0-9a-f]+)")
KFD = Path("/dev/kfd")  # amdkfd's device: present wherever amdgpu drives a GPU that HIP can use


def code_objects(data: bytes) -> set[str]:
    """The gfx targets of the code objects in a `.hip_fatbin` section."""
    return {m.decode() for m in _HIP_TARGET.findall(data)}


def kfd_targets(sys_root: Path = Path("/sys")) -> list[str]:
    """The gfx targets of this host's AMD GPUs as the kernel's amdkfd lists them: each topology node's
    `gfx_target_version` (major·10000 + minor·100 + stepping; 0 for a CPU node), without any ROCm installed."""
    found = set()
    for properties in sorted((sys_root / "class" / "kfd" / "kfd" / "topology" / "nodes").glob("*/properties")):
        match = re.search(r"^gfx_target_version (\d+)$", read_file(properties) or "", flags=re.MULTILINE)
        version = int(match.group(1)) if match else 0
        if version:
            found.add(f"gfx{version // 10000}{version // 100 % 100:x}{version % 100:x}")
    return sorted(found, key=gfx_key)


def visible_targets(environ: Mapping[str, str], sys_root: Path = Path("/sys")) -> list[str]:
    """The gfx targets of this host's AMD GPUs: amdkfd's topology, else rocminfo's list (gfx000 is the CPU agent)."""
    from buildmgr.backends.hip.preflight import find_rocm

    found = kfd_targets(sys_root)
    rocminfo = proc.which("rocminfo", environ, str(find_rocm(environ).bin)) if not found else None
    if rocminfo:
        listed = proc.run([rocminfo], timeout=60, env=dict(environ)).output
        found = sorted(set(re.findall(r"\b(gfx[0-9a-f]{3,4})\b", listed)), key=gfx_key)
    return [g for g in found if g != "gfx000"]


def kernel_findings(targets: Sequence[str], visible: list[str]) -> list[Finding]:
    """An error per visible AMD GPU whose gfx target is not compiled in (HIP code objects do not JIT)."""
    return [
        Finding(
            Severity.ERROR,
            NAMES.title,
            f"the {gfx} GPU has no code in this build ({', '.join(targets) or 'none'}): it would fail with "
            f"'no kernel image is available'",
            f"build with --gfx {gfx}",
        )
        for gfx in visible
        if gfx not in targets
    ]


def host_findings(targets: Sequence[str], environ: Mapping[str, str]) -> list[Finding]:
    """`kernel_findings` for the AMD GPUs here."""
    return kernel_findings(targets, visible_targets(environ))


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    if any(environ.get(k) in ("", "-1") for k in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES") if k in environ):
        return "HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES hides every ROCm device"
    if not KFD.exists():
        return "no HIP device on this host (no /dev/kfd: the amdgpu kernel driver has no GPU here)"
    return "no device found"
