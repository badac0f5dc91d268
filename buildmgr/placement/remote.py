"""A placement on other hosts' devices (llama.cpp's RPC backend), checked for what its client does: it looks a device
name up as it reads it, and it says a remote device can run every op."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.core.findings import Finding, Severity
from buildmgr.placement import rules

if TYPE_CHECKING:
    from buildmgr.core.device_records import Device
    from buildmgr.placement.syntax import Placement


def remote_findings(
    placement: Placement, devices: Sequence[Device], commit: str, chosen: Sequence[str]
) -> list[Finding]:
    """A server's device named before the servers are added (llama.cpp stops: invalid device); and a remote device
    whose client claims every op: -fa auto turns FlashAttention on there whatever the server's card can run, and a
    server without those kernels aborts (the client cannot know: only the server's build does)."""
    registry, remote = backends.remote()
    early = [
        d.name for d in devices if d.backend == registry and d.name.lower() in map(str.lower, placement.named_early)
    ]
    findings = [
        rules.BY_ID["invalid-device"].error(
            f"{placement.flag('devices')} {name}",
            f"{name} is named before {placement.flag('servers')} adds the servers' devices, and llama.cpp looks a "
            "name up as it reads it",
            f"put {placement.flag('servers')} before {placement.flag('devices')}",
            commit,
        )
        for name in early
    ]
    remote_names = [d.name for d in devices if d.backend == registry and d.name in chosen]
    if not remote.claims_every_op or not remote_names or placement.flash_attn != "auto":
        return findings
    return [
        *findings,
        Finding(
            Severity.WARNING,
            f"{placement.flag('devices')} {','.join(remote_names)}",
            f"llama.cpp's {registry} client says {', '.join(remote_names)} can run every op, so -fa auto turns "
            "FlashAttention on there whatever the server's card can run: a server built without its kernels aborts "
            "and fails every client",
            "give -fa off, unless every server's build has FlashAttention kernels",
            rules.REMOTE_OP,
        ),
    ]
