"""vulkaninfo's view of the GPUs: device types and UUIDs matched to the Vulkan devices ggml lists (its type settles
what ggml cannot: a CPU driver such as lavapipe), and why a Vulkan build sees no device here."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from buildmgr.backends.vulkan import NAME
from buildmgr.core.device_records import Role, one_to_one

if TYPE_CHECKING:
    from buildmgr.core.device_records import Captures, Device


@dataclass(frozen=True)
class VulkanGpu:
    index: int
    name: str
    type: Role
    uuid: str | None


_VK_TYPES = {
    "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU": Role.GPU,
    "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU": Role.IGPU,
    "PHYSICAL_DEVICE_TYPE_CPU": Role.CPU,
    "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU": Role.GPU,
}
SKIPPED = "not run: ggml gave every Vulkan device a PCI id"


def parse_vulkaninfo_summary(text: str) -> list[VulkanGpu]:
    """`vulkaninfo --summary` → one record per GPUn block."""
    gpus: list[VulkanGpu] = []
    blocks = re.split(r"^GPU(\d+):\s*$", text, flags=re.MULTILINE)
    for number, body in zip(blocks[1::2], blocks[2::2], strict=False):
        fields = dict(re.findall(r"^\s*(\w+)\s*=\s*(.*?)\s*$", body, flags=re.MULTILINE))
        uuid = fields.get("deviceUUID")
        gpus.append(
            VulkanGpu(
                int(number),
                fields.get("deviceName", ""),
                _VK_TYPES.get(fields.get("deviceType", ""), Role.UNKNOWN),
                uuid.lower() if uuid else None,
            )
        )
    return gpus


def vulkaninfo_needed(builds: Sequence[tuple[tuple[str, ...], tuple[Device, ...]]]) -> bool:
    """vulkaninfo (slow: it starts every Vulkan driver) only adds what ggml cannot say: a Vulkan device without a
    PCI id (a CPU driver such as lavapipe), or why a Vulkan build sees no device at all."""
    for built, devices in builds:
        if NAME in built:
            mine = [d for d in devices if d.backend == NAME]
            if not mine or any(d.pci_bus_id is None for d in mine):
                return True
    return False


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    vulkan = captures.get(NAME, [])
    if environ.get("GGML_VK_VISIBLE_DEVICES") == "":
        return "GGML_VK_VISIBLE_DEVICES is set and empty, which hides every Vulkan device"
    if vulkan and all(g.type == Role.CPU for g in vulkan):
        names = ", ".join(g.name for g in vulkan)
        return (
            f"the only Vulkan driver here is CPU-type ({names}), which llama.cpp skips "
            "unless GGML_VK_VISIBLE_DEVICES names it (e.g. GGML_VK_VISIBLE_DEVICES=0)"
        )
    if not vulkan:
        return "vulkaninfo found no Vulkan device (no ICD driver, or VK_DRIVER_FILES points elsewhere)"
    return "no device found"


def match_vulkaninfo(devices: list[Device], vulkan: list[VulkanGpu], notes: list[str]) -> list[Device]:
    """vulkaninfo's UUID and device type for the Vulkan devices: by UUID, else by name where one to one. Its type
    settles what ggml cannot: a CPU driver (lavapipe) that ggml calls a GPU is a CPU, said in `notes`."""
    from buildmgr.core.device_records import RoleBasis

    mine = [d for d in devices if d.backend == NAME]
    by_uuid = {g.uuid: g for g in vulkan if g.uuid}
    by_name = one_to_one([d for d in mine if d.uuid is None], vulkan, lambda d, g: g.name == d.description)
    matched = []
    for device in devices:
        gpu = (
            (by_uuid.get(device.uuid) if device.uuid else by_name.get(device.name)) if device.backend == NAME else None
        )
        if gpu is not None:
            role = _role(device, gpu.type, notes)
            told = role != device.type
            device = dataclasses.replace(device, uuid=gpu.uuid, type=role)
            if told:
                device = dataclasses.replace(
                    device, role_basis=RoleBasis.TOOL, role_reason=f"vulkaninfo types it {gpu.type}"
                )
        matched.append(device)
    return matched


def _role(device: Device, driver_type: Role, notes: list[str]) -> Role:
    if driver_type == Role.CPU and device.type != Role.CPU:
        notes.append(
            f"{device.name}: ggml reports {device.ggml_type or 'no type'}, but vulkaninfo says it is a CPU driver"
        )
        return Role.CPU
    return device.type if device.type != Role.UNKNOWN else driver_type


def host_json(gpus: list[VulkanGpu] | None) -> dict[str, Any]:
    found = [asdict(g) | {"type": str(g.type)} for g in gpus] if gpus is not None else SKIPPED
    return {"drivers": {"vulkan_devices": found}}
