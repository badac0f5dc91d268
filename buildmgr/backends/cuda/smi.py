"""nvidia-smi's view of the GPUs: UUIDs and PCI ids matched to the devices ggml lists, the capabilities a `native`
build is for, and why a CUDA build sees no device here."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from buildmgr.backends.cuda import NAME
from buildmgr.core import proc
from buildmgr.core.device_records import one_to_one

if TYPE_CHECKING:
    from buildmgr.core.device_records import Captures, Device


@dataclass(frozen=True)
class NvidiaGpu:
    index: int
    name: str
    uuid: str  # without the GPU- prefix, lower case: comparable with vulkaninfo's deviceUUID
    pci_bus_id: str
    memory_total_mib: int | None
    driver: str | None = None


def parse_nvidia_smi_csv(text: str) -> list[NvidiaGpu]:
    """`nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total[,driver_version] --format=csv[,noheader]`."""
    import csv  # here, not at the top: a no-op build imports this module and reads no capture

    from buildmgr.core.device_records import normalize_pci

    gpus = []
    for row in csv.reader(text.splitlines()):  # any line ending, a stray \r included
        cells = [c.strip() for c in row]
        if len(cells) < 4 or not cells[0].isdigit():
            continue  # the header, or noise
        memory = re.match(r"(\d+)", cells[4]) if len(cells) > 4 else None
        gpus.append(
            NvidiaGpu(
                int(cells[0]),
                cells[1],
                cells[2].removeprefix("GPU-").lower(),
                normalize_pci(cells[3]) or cells[3].lower(),
                int(memory.group(1)) if memory else None,
                cells[5] if len(cells) > 5 else None,
            )
        )
    return gpus


def match_nvidia_smi(devices: list[Device], nvidia: list[NvidiaGpu], notes: list[str] | None = None) -> list[Device]:
    """nvidia-smi's UUID and PCI id for the devices that are its GPUs: any backend's device by PCI id; a CUDA device
    without one by name where the match is one to one, or when it is the only CUDA device and the only GPU."""
    by_pci = {g.pci_bus_id: g for g in nvidia}
    unplaced = [d for d in devices if d.backend == NAME and d.pci_bus_id is None]
    by_name = one_to_one(unplaced, nvidia, lambda d, g: g.name == d.description)
    if not by_name and len(nvidia) == 1 and len(unplaced) == 1 == sum(d.backend == NAME for d in devices):
        by_name = {unplaced[0].name: nvidia[0]}
    matched = []
    for device in devices:
        gpu = by_pci.get(device.pci_bus_id) if device.pci_bus_id else by_name.get(device.name)
        if gpu is not None:
            device = dataclasses.replace(device, uuid=gpu.uuid, pci_bus_id=device.pci_bus_id or gpu.pci_bus_id)
        matched.append(device)
    return matched


def host_json(gpus: list[NvidiaGpu] | None) -> dict[str, object]:
    gpus = gpus or []
    return {"drivers": {"nvidia": gpus[0].driver if gpus else None}, "nvidia_gpus": [asdict(g) for g in gpus]}


def wanted(builds: Sequence[tuple[tuple[str, ...], tuple[Device, ...]]]) -> bool:
    """nvidia-smi is quick, and its UUIDs tie CUDA and Vulkan names to one card: always asked."""
    return True


def visible_capabilities(environ: Mapping[str, str]) -> list[str]:
    """Compute capabilities of the GPUs CUDA would see here, e.g. ['9.0']; empty when none is visible."""
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return []
    smi = proc.which("nvidia-smi", environ)
    if smi is None:
        return []
    ran = proc.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], timeout=30, env=dict(environ))
    return (
        sorted({ln.strip() for ln in ran.output.splitlines() if re.match(r"^\d+\.\d+$", ln.strip())}) if ran.ok else []
    )


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every CUDA device"
    if not captures.get(NAME):
        return "no NVIDIA GPU visible (nvidia-smi found none)"
    return "no device found"
