"""Stage 8: what a build really sees. Parse `--list-devices` (and vulkaninfo / nvidia-smi captures),
and run a build's probe with a timeout. Parsing is pure; running sits in `probe_build`."""

from __future__ import annotations

import csv
import io
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from buildmgr.errors import UserError

HEADER = "Available devices:"
# The memory group is the last parenthesised group: descriptions may hold their own parentheses.
_DEVICE = re.compile(r"^\s+([A-Za-z][A-Za-z_]*?)(\d*):\s+(.*?)\s+\((\d+) MiB, (\d+) MiB free\)\s*$")
# Backends whose devices are GPUs by nature; Vulkan needs vulkaninfo to tell a GPU from an iGPU or a CPU.
_GPU_BACKENDS = {"CUDA", "ROCm", "MUSA", "SYCL", "MTL", "CANN", "GPUOpenCL", "WebGPU", "OPENVINO"}
# Variables that change which devices a build enumerates; recorded with every probe.
ENUMERATION_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "GGML_VK_VISIBLE_DEVICES",
    "VK_DRIVER_FILES",
    "VK_ICD_FILENAMES",
)
PROBE_TIMEOUT_S = 60


@dataclass(frozen=True)
class Device:
    name: str
    backend: str
    index: int | None
    description: str
    memory_total_mib: int
    memory_free_mib: int
    type: str = "unknown"
    physical_id: str = ""
    uuid: str | None = None
    pci_bus_id: str | None = None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def parse_list_devices(text: str) -> list[Device]:
    """`llama-* --list-devices` output (stderr noise allowed) → devices; UserError if it has no device block."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == HEADER)
    except StopIteration:
        raise UserError(
            f"no '{HEADER}' block found: is this the output of a llama.cpp tool's --list-devices?"
        ) from None
    devices = []
    for line in lines[start + 1 :]:
        match = _DEVICE.match(line)
        if not match:
            continue
        backend, number, description, total, free = match.groups()
        kind = "accel" if backend == "BLAS" else "gpu" if backend in _GPU_BACKENDS else "unknown"
        devices.append(
            Device(
                f"{backend}{number}", backend, int(number) if number else None, description, int(total), int(free), kind
            )
        )
    return devices


@dataclass(frozen=True)
class VulkanGpu:
    index: int
    name: str
    type: str  # gpu | igpu | cpu | unknown
    uuid: str | None


_VK_TYPES = {
    "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU": "gpu",
    "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU": "igpu",
    "PHYSICAL_DEVICE_TYPE_CPU": "cpu",
    "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU": "gpu",
}


def parse_vulkaninfo_summary(text: str) -> list[VulkanGpu]:
    """`vulkaninfo --summary` → one record per GPUn block."""
    gpus: list[VulkanGpu] = []
    blocks = re.split(r"^GPU(\d+):\s*$", text, flags=re.MULTILINE)
    for number, body in zip(blocks[1::2], blocks[2::2]):
        fields = dict(re.findall(r"^\s*(\w+)\s*=\s*(.*?)\s*$", body, flags=re.MULTILINE))
        uuid = fields.get("deviceUUID")
        gpus.append(
            VulkanGpu(
                int(number),
                fields.get("deviceName", ""),
                _VK_TYPES.get(fields.get("deviceType", ""), "unknown"),
                uuid.lower() if uuid else None,
            )
        )
    return gpus


@dataclass(frozen=True)
class NvidiaGpu:
    index: int
    name: str
    uuid: str  # without the GPU- prefix, lower case: comparable with vulkaninfo's deviceUUID
    pci_bus_id: str
    memory_total_mib: int | None


def parse_nvidia_smi_csv(text: str) -> list[NvidiaGpu]:
    """`nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv[,noheader]`."""
    gpus = []
    for row in csv.reader(io.StringIO(text)):
        cells = [c.strip() for c in row]
        if len(cells) < 4 or not cells[0].isdigit():
            continue  # the header, or noise
        memory = re.match(r"(\d+)", cells[4]) if len(cells) > 4 else None
        gpus.append(
            NvidiaGpu(
                int(cells[0]),
                cells[1],
                cells[2].removeprefix("GPU-").lower(),
                cells[3].lower(),
                int(memory.group(1)) if memory else None,
            )
        )
    return gpus


@dataclass(frozen=True)
class DrmCard:
    """A GPU as the kernel sees it: which driver holds it, even when no user-space API lists it."""

    card: str
    driver: str
    pci_bus_id: str | None
    vendor: str  # PCI vendor id: 0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel


def read_drm_cards(root: Path = Path("/sys/class/drm")) -> list[DrmCard]:
    """`/sys/class/drm/cardN/device/{uevent,vendor}`; connectors (card0-HDMI-A-1 …) are skipped."""
    cards = []
    for entry in sorted(root.glob("card*")) if root.is_dir() else []:
        if not re.fullmatch(r"card\d+", entry.name):
            continue
        try:
            uevent = dict(
                line.split("=", 1) for line in (entry / "device" / "uevent").read_text().splitlines() if "=" in line
            )
            vendor = (entry / "device" / "vendor").read_text().strip()
        except OSError:
            continue
        cards.append(DrmCard(entry.name, uevent.get("DRIVER", ""), uevent.get("PCI_SLOT_NAME"), vendor))
    return cards


# --- running a build's probe --------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    devices: tuple[Device, ...]
    seconds: float
    tool: str
    env: dict[str, str]
    error: str = ""
    output: str = ""


def enumeration_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: environ[k] for k in ENUMERATION_ENV if k in environ}


def probe_tool(prefix: Path) -> Path | None:
    for name in ("llama-bench", "llama-cli", "llama-completion", "llama-server"):
        if (prefix / "bin" / name).is_file():
            return prefix / "bin" / name
    return None


def probe_build(prefix: Path, environ: dict[str, str] | None = None, timeout: float = PROBE_TIMEOUT_S) -> ProbeResult:
    environ = dict(os.environ if environ is None else environ)
    tool = probe_tool(prefix)
    recorded = enumeration_env(environ)
    if tool is None:
        return ProbeResult(False, (), 0.0, "", recorded, error="no llama tool in the prefix")
    start = time.monotonic()
    try:
        result = subprocess.run(
            [str(tool), "--list-devices"], capture_output=True, text=True, timeout=timeout, env=environ, check=False
        )
    except subprocess.TimeoutExpired:
        return ProbeResult(
            False, (), round(time.monotonic() - start, 3), tool.name, recorded, error=f"timed out after {timeout:.0f} s"
        )
    except OSError as err:
        return ProbeResult(False, (), 0.0, tool.name, recorded, error=str(err))
    seconds = round(time.monotonic() - start, 3)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        last = (output.strip().splitlines() or ["no output"])[-1]
        return ProbeResult(
            False, (), seconds, tool.name, recorded, error=f"exit {result.returncode}: {last}", output=output
        )
    try:
        devices = parse_list_devices(result.stdout)
    except UserError as err:
        return ProbeResult(False, (), seconds, tool.name, recorded, error=str(err), output=output)
    return ProbeResult(True, tuple(devices), seconds, tool.name, recorded, output=output)
