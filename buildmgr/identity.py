"""Which device names are one physical card, and what kind of device each is. Pure functions.

Rules, strongest first:
1. UUID (nvidia-smi's GPU-<uuid> equals vulkaninfo's deviceUUID) or PCI bus id, where a device can be
   tied to one unambiguously;
2. otherwise the same description and total memory within 5 % or 512 MiB, across different backends,
   and only when the pairing is unambiguous in both directions;
3. otherwise the device stands alone. Two devices of one backend never share an id.
"""

from __future__ import annotations

import re
from dataclasses import replace

from buildmgr.probe import Device, NvidiaGpu, VulkanGpu

MEMORY_TOLERANCE = 0.05
MEMORY_SLACK_MIB = 512


def _plain(description: str) -> str:
    """'AMD Radeon Graphics (RADV GFX1151)' and 'AMD Radeon Graphics' describe one card."""
    return re.sub(r"\s*\([^()]*\)\s*$", "", description).strip().lower()


def memory_close(a: int, b: int) -> bool:
    return abs(a - b) <= max(MEMORY_SLACK_MIB, MEMORY_TOLERANCE * max(a, b))


def _unique(candidates: list):
    return candidates[0] if len(candidates) == 1 else None


def enrich(devices: list[Device], nvidia: list[NvidiaGpu], vulkan: list[VulkanGpu]) -> list[Device]:
    """Attach UUID, PCI bus id and type from nvidia-smi / vulkaninfo where the match is unambiguous."""
    enriched = []
    for device in devices:
        if device.backend == "CUDA":
            gpu = _unique([g for g in nvidia if g.name == device.description])
            if gpu is None and len(nvidia) == 1 and sum(d.backend == "CUDA" for d in devices) == 1:
                gpu = nvidia[0]
            if gpu is not None:
                device = replace(device, uuid=gpu.uuid, pci_bus_id=gpu.pci_bus_id)
        elif device.backend == "Vulkan":
            gpu = _unique([g for g in vulkan if g.name == device.description])
            if gpu is not None:
                device = replace(device, type=gpu.type, uuid=gpu.uuid)
        enriched.append(device)
    return enriched


def _key(device: Device) -> str | None:
    return f"uuid:{device.uuid}" if device.uuid else f"pci:{device.pci_bus_id}" if device.pci_bus_id else None


def _alike(a: Device, b: Device) -> bool:
    return _plain(a.description) == _plain(b.description) and memory_close(a.memory_total_mib, b.memory_total_mib)


def assign_physical_ids(devices: list[Device]) -> tuple[list[Device], list[str]]:
    """Give every device a physical_id; returns the devices and notes on pairings left unknown."""
    parent = {d.name: d.name for d in devices}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    def backends_of(name: str) -> set[str]:
        top = root(name)
        return {d.backend for d in devices if root(d.name) == top}

    def join(a: Device, b: Device) -> None:
        if root(a.name) != root(b.name) and not backends_of(a.name) & backends_of(b.name):
            parent[root(b.name)] = root(a.name)

    for a in devices:  # 1. hardware ids
        for b in devices:
            if a.backend != b.backend and _key(a) and _key(a) == _key(b):
                join(a, b)
    notes = []
    pairable = [d for d in devices if d.backend not in ("RPC", "BLAS")]
    for a in pairable:  # 2. same description and memory, unambiguous both ways
        for backend in sorted({d.backend for d in pairable} - {a.backend}):
            mine = [d for d in pairable if d.backend == backend and _alike(a, d)]
            theirs = [d for d in pairable if d.backend == a.backend and mine and _alike(mine[0], d)]
            if len(mine) == 1 and len(theirs) == 1:
                if not (_key(a) and _key(mine[0]) and _key(a) != _key(mine[0])):
                    join(a, mine[0])
            elif mine:
                names = ", ".join(sorted(d.name for d in mine + theirs))
                notes.append(
                    f"pairing unknown: {names} look alike (same name and memory); UUIDs from "
                    "nvidia-smi or vulkaninfo would tell them apart"
                )
    ids = {}
    for device in devices:
        members = sorted((d for d in devices if root(d.name) == root(device.name)), key=lambda d: d.name)
        keyed = next((_key(m) for m in members if _key(m)), None)
        ids[device.name] = keyed or (
            f"match:{'+'.join(m.name for m in members)}" if len(members) > 1 else f"alone:{device.name}"
        )
    result = [replace(d, physical_id=ids[d.name]) for d in devices]
    return _share_types(result), sorted(set(notes))


def _share_types(devices: list[Device]) -> list[Device]:
    """One card has one type: the most specific any of its names got (an iGPU under Vulkan is one under ROCm)."""
    precedence = ("cpu", "igpu", "accel", "gpu", "unknown")
    best: dict[str, str] = {}
    for device in devices:
        current = best.get(device.physical_id, "unknown")
        best[device.physical_id] = min(current, device.type, key=precedence.index)
    return [replace(d, type=best[d.physical_id]) for d in devices]


def igpu_notes(devices: list[Device]) -> list[str]:
    return [f"iGPU = {d.name} ({d.description})" for d in devices if d.type == "igpu"]


def resolve(devices: list[Device], nvidia: list[NvidiaGpu], vulkan: list[VulkanGpu]) -> tuple[list[Device], list[str]]:
    identified, notes = assign_physical_ids(enrich(devices, nvidia, vulkan))
    return identified, notes + igpu_notes(identified)
