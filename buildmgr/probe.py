"""Stage 8: what a build really sees. Parse `--list-devices` (and vulkaninfo / nvidia-smi captures),
and run a build's probe with a timeout. Parsing is pure; running sits in `probe_build`."""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from buildmgr import proc
from buildmgr.backends import NOT_A_CARD
from buildmgr.errors import UserError

HEADERS = ("Available devices:", "Devices:")  # llama tools' --list-devices; rpc-server's start-up
_MEMORY = r"\s+\((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$"
_NAME = r"(?P<backend>[A-Za-z][A-Za-z_]*?)(?P<index>\d*):\s+(?P<description>\S.*?)"
# A device line right after its header's prefix; the memory group is optional (older or trimmed captures)
# and is the last parenthesised group, since descriptions hold their own parentheses.
_DEVICE = re.compile(r"^\s{1,4}" + _NAME + r"(?:" + _MEMORY + r"|\s*$)")
# Anywhere in a line behind some other log prefix, only with the memory group.
_PREFIXED_DEVICE = re.compile(r"\s{2}" + _NAME + _MEMORY)
# "ggml_vulkan: 0 = AMD Radeon Graphics (RADV GFX1151) (radv) | uma: 1 | ...": uma 1 is an integrated GPU.
_VULKAN_UMA = re.compile(r"ggml_vulkan: (\d+) = .*?\| uma: ([01]) \|")
_PCI = re.compile(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])(-v\d+)?$")
MIB = 1 << 20
PROBE_TIMEOUT_S = 60
_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)  # the API child imports buildmgr from here


def normalize_pci(bus_id: str | None) -> str | None:
    """'00000000:06:00.0' (nvidia-smi), '0000:06:00.0' (CUDA, Vulkan) → '0000:06:00.0'; None if not a PCI id."""
    match = _PCI.match((bus_id or "").strip().lower())
    if not match:
        return None
    domain, bus, device, function, virtual = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus}:{device}.{function}{virtual or ''}"


def role_of(backend: str, ggml_type: str | None) -> str:
    """The device's role from ggml's own type, except for a device that is not a card (BLAS, RPC)."""
    if backend in NOT_A_CARD:
        return NOT_A_CARD[backend]
    return ggml_type if ggml_type in ("gpu", "igpu", "accel", "cpu") else "unknown"


@dataclass(frozen=True)
class Device:
    name: str
    backend: str
    index: int | None
    description: str
    memory_total_mib: int | None
    memory_free_mib: int | None
    type: str = "unknown"  # the role: gpu | igpu | accel | cpu | remote | unknown
    physical_id: str = ""
    uuid: str | None = None
    pci_bus_id: str | None = None
    ggml_type: str | None = None  # what ggml itself reports; known only from the API probe
    device_id: str | None = None  # ggml's raw device_id
    caps: dict[str, bool] | None = None
    source: str = "list-devices"  # ggml-api | list-devices
    kernel_driver: str | None = None  # /sys/class/drm: which kernel driver holds the card

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Device:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _device(backend: str, index: str, description: str, total: str | None, free: str | None, uma: dict) -> Device:
    number = int(index) if index else None
    role = role_of(backend, None)
    if backend == "Vulkan" and uma.get(number) == "1":
        role = "igpu"
    return Device(
        f"{backend}{index}",
        backend,
        number,
        description.strip(),
        int(total) if total is not None else None,
        int(free) if free is not None else None,
        role,
    )


def _header_prefix(line: str) -> str | None:
    """The log prefix in front of a device block's header ('' for a bare header), or None if not a header."""
    text = line.rstrip()
    if text.strip() in HEADERS:
        return ""
    main = HEADERS[0]
    if text.endswith(main) and text[: -len(main)][-1:] in (" ", "=", ":", '"'):
        return text[: -len(main)]
    return None


def parse_list_devices(text: str) -> list[Device]:
    """`llama-* --list-devices` (or rpc-server) output → devices; UserError if it has no device block.

    Noise is allowed anywhere: init logs before or after the block, prompt lines, log prefixes.
    """
    lines = text.splitlines()
    found = next(((n, prefix) for n, line in enumerate(lines) if (prefix := _header_prefix(line)) is not None), None)
    if found is None:
        raise UserError(f"no '{HEADERS[0]}' block found: is this the output of a llama.cpp tool's --list-devices?")
    start, prefix = found
    uma = {int(i): flag for i, flag in _VULKAN_UMA.findall(text)}
    devices: list[Device] = []
    for line in lines[start + 1 :]:
        bare = line[len(prefix) :] if prefix.strip() and line.startswith(prefix) else line
        match = _DEVICE.match(bare) or _PREFIXED_DEVICE.search(line)
        if match and match["backend"] != "Device":  # ggml_cuda_init's "  Device 0: …" lines
            devices.append(
                _device(match["backend"], match["index"], match["description"], match["total"], match["free"], uma)
            )
    return devices


def device_from_api(record: dict) -> Device:
    """One record of `ggml_api.read_devices` → a Device, memory in MiB as --list-devices prints it."""
    name, backend = str(record["name"]), str(record["backend"])
    number = re.search(r"(\d+)$", name)
    return Device(
        name,
        backend,
        int(number.group(1)) if number else None,
        str(record["description"] or ""),
        int(record["memory_total"]) // MIB,
        int(record["memory_free"]) // MIB,
        role_of(backend, str(record["type"])),
        pci_bus_id=normalize_pci(record.get("device_id")),
        ggml_type=str(record["type"]),
        device_id=record.get("device_id"),
        caps=dict(record.get("caps") or {}),
        source="ggml-api",
    )


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
    driver: str | None = None


def parse_nvidia_smi_csv(text: str) -> list[NvidiaGpu]:
    """`nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total[,driver_version] --format=csv[,noheader]`."""
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
    method: str = ""  # ggml-api: the build's own libraries; list-devices: the parse, when the API could not run
    api_error: str = ""  # why the API probe was not used
    mismatches: tuple[str, ...] = ()  # where the API and --list-devices disagree


def enumeration_env(environ: dict[str, str]) -> dict[str, str]:
    from buildmgr.backends import enumeration_variables

    return {k: environ[k] for k in enumeration_variables() if k in environ}


def probe_tool(prefix: Path) -> Path | None:
    for name in ("llama-bench", "llama-cli", "llama-completion", "llama-server"):
        if (prefix / "bin" / name).is_file():
            return prefix / "bin" / name
    return None


def backend_module_dir(prefix: Path) -> Path | None:
    """Where a GGML_BACKEND_DL build keeps its backend modules (ggml installs them beside the tools)."""
    return prefix / "bin" if any((prefix / "bin").glob("libggml-*.so")) else None


def _api_command(prefix: Path) -> tuple[list[str] | None, str]:
    """The API child's command line, or why it cannot run on this prefix."""
    from buildmgr import ggml_api

    lib = prefix / "lib"
    if not (lib / "libggml.so").exists() or not (lib / "libggml-base.so").exists():
        return None, f"no libggml.so / libggml-base.so in {lib} (a static build?)"
    header = prefix / "include" / "ggml-backend.h"
    if header.exists():
        problems = ggml_api.layout_mismatches(header.read_text(encoding="utf-8", errors="replace"))
        if problems:
            return None, "this build's ggml-backend.h differs from buildmgr's ctypes declarations: " + "; ".join(
                problems
            )
    modules = backend_module_dir(prefix)
    return [sys.executable, "-m", "buildmgr.ggml_api", str(lib), *([str(modules)] if modules else [])], ""


def _api_devices(ran: proc.Ran) -> tuple[list[Device] | None, str]:
    from buildmgr.ggml_api import MARKER

    if not ran.ok:
        return None, ran.failure()
    line = next((ln for ln in ran.stdout.splitlines() if ln.startswith(MARKER)), None)
    try:
        records = json.loads(line[len(MARKER) :]) if line else None
        return [device_from_api(r) for r in records if r["type"] != "cpu"], ""
    except (TypeError, ValueError, KeyError) as err:
        return None, f"unreadable answer ({err})"


def cross_check(api: list[Device], listed: list[Device]) -> tuple[str, ...]:
    """Every name the API gives must be in --list-devices, and vice versa."""
    api_names, listed_names = [d.name for d in api], [d.name for d in listed]
    only_api = [n for n in api_names if n not in listed_names]
    only_listed = [n for n in listed_names if n not in api_names]
    return tuple(
        [f"{n}: given by ggml's API but not by --list-devices" for n in only_api]
        + [f"{n}: listed by --list-devices but not by ggml's API" for n in only_listed]
    )


def probe_build(prefix: Path, environ: dict[str, str] | None = None, timeout: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Ask the build's own libraries (ggml's device API, in a child) and its tool's --list-devices, together.

    The API is the answer; the parse is the cross-check, and the fallback when the API cannot run.
    """
    environ = dict(os.environ if environ is None else environ)
    tool = probe_tool(prefix)
    recorded = enumeration_env(environ)
    if tool is None:
        return ProbeResult(False, (), 0.0, "", recorded, error="no llama tool in the prefix")
    api_command, api_error = _api_command(prefix)
    child_env = environ | {"PYTHONPATH": os.pathsep.join(filter(None, (_PACKAGE_ROOT, environ.get("PYTHONPATH"))))}
    start = time.monotonic()
    commands = [[str(tool), "--list-devices"]] + ([api_command] if api_command else [])
    listed_run, *api_run = proc.run_together(commands, timeout=timeout, env=child_env)
    seconds = round(time.monotonic() - start, 3)
    output = listed_run.stdout + listed_run.stderr
    listed, list_error = None, ""
    if listed_run.ok:
        try:
            listed = parse_list_devices(listed_run.stdout)
        except UserError as err:
            list_error = str(err)
    else:
        list_error = listed_run.failure()
    api = None
    if api_run:
        api, api_error = _api_devices(api_run[0])
    common = {"seconds": seconds, "tool": tool.name, "env": recorded, "output": output, "api_error": api_error}
    if api is not None:
        mismatches = cross_check(api, listed) if listed is not None else (f"--list-devices failed: {list_error}",)
        return ProbeResult(True, tuple(api), method="ggml-api", mismatches=mismatches, **common)
    if listed is not None:
        return ProbeResult(True, tuple(listed), method="list-devices", **common)
    return ProbeResult(False, (), error=list_error, **common)
