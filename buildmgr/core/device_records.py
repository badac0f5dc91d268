"""The device records every layer shares: a device as llama.cpp names it, a card as the kernel sees it, what
llama.cpp does with a device when no `-dev` is given, PCI ids in one spelling, and devices matched one to one with a
vendor tool's rows. Nothing here knows a vendor:
the backend modules hold their own tools' records; this module sits below them and below the probe."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, NewType

from buildmgr.core.jsonshape import OMIT_IF_NONE

_PCI = re.compile(r"^(?:([0-9a-f]{4,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])(-v\d+)?$")
# A name given to two different cards by builds probed under different environments is shown as NAME@PCI.
_QUALIFIER = "@"

# What a vendor tool saw, per backend name (see backends.Capture); a backend missing here was not asked.
Captures = Mapping[str, list[Any]]


def normalize_pci(bus_id: str | None) -> str | None:
    """'00000000:06:00.0' (nvidia-smi), '0000:06:00.0' (ggml) → '0000:06:00.0'; None if not a PCI id."""
    match = _PCI.match((bus_id or "").strip().lower())
    if not match:
        return None
    domain, bus, device, function, virtual = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus}:{device}.{function}{virtual or ''}"


def plain_description(description: str) -> str:
    """'AMD Radeon Graphics (RADV GFX1151)' and 'AMD Radeon Graphics' describe one card: every trailing
    parenthesis (a codename, a driver) removed, in lower case."""
    return re.sub(r"(?:\s*\([^()]*\))+\s*$", "", description).strip().lower()


def qualified(name: str, pci_bus_id: str | None) -> str:
    """The name of a device that another card has under the same name in another build."""
    return f"{name}{_QUALIFIER}{pci_bus_id}"


def plain_name(name: str) -> str:
    """The name llama.cpp uses, without the qualifier `qualified` added."""
    return name.split(_QUALIFIER, 1)[0]


# A physical card's id: `pci:0000:06:00.0` or `uuid:…` (a hardware id), `match:<name>+<name>` (names paired by
# description and memory alone), or `alone:<name>` (nothing ties it to another name). Built only here.
PhysicalId = NewType("PhysicalId", str)


def hardware_id(kind: str, value: str) -> PhysicalId:
    """`kind` is pci or uuid."""
    return PhysicalId(f"{kind}:{value}")


def matched_id(names: Iterable[str]) -> PhysicalId:
    return PhysicalId(f"match:{'+'.join(names)}")


def alone_id(name: str) -> PhysicalId:
    return PhysicalId(f"alone:{name}")


class Role(str, Enum):
    """What a device is to the user: a discrete GPU, an integrated one, the CPU (or a CPU-type driver such as
    lavapipe), an accelerator (BLAS), another host (RPC), or not known (said so, never guessed)."""

    GPU = "gpu"
    IGPU = "igpu"
    CPU = "cpu"
    ACCEL = "accel"
    REMOTE = "remote"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


class RoleBasis(str, Enum):
    """What told a device's role, so that a role never read from ggml says where it came from."""

    GGML = "ggml"  # ggml's own device type (the API probe)
    BACKEND = "backend"  # the backend is not a card: CPU, BLAS, RPC
    LOG = "log"  # a line of the text says it (ggml_vulkan's uma: 1)
    NAME = "name"  # a family known from its name (a table in backends/)
    TOOL = "tool"  # a vendor tool's device type (vulkaninfo)

    def __str__(self) -> str:
        return self.value


_SAID_WHEN_TOLD = ("role_basis", "role_reason", "run", "driver")  # absent where None


@dataclass(frozen=True)
class Device:
    name: str
    backend: str
    index: int | None
    description: str
    memory_total_mib: int | None
    memory_free_mib: int | None
    type: Role = Role.UNKNOWN
    physical_id: str = ""
    uuid: str | None = None
    pci_bus_id: str | None = None
    ggml_type: str | None = None  # what ggml itself reports; known only from the API probe
    device_id: str | None = None  # ggml's raw device_id
    caps: dict[str, bool] | None = None
    source: str = "list-devices"  # ggml-api | list-devices | log (pasted text without a device list)
    kernel_driver: str | None = None  # /sys/class/drm: which kernel driver holds the card
    # None: the role is unknown or a vendor tool's. Absent in files before 2026-12-01.
    role_basis: RoleBasis | None = field(default=None, metadata=OMIT_IF_NONE)
    # for people, with a name or log basis: "Intel UHD Graphics is integrated"
    role_reason: str | None = field(default=None, metadata=OMIT_IF_NONE)
    # pasted text only: which run of a program in the text printed it (0, 1 …: two builds or hosts stay apart)
    run: int | None = field(default=None, metadata=OMIT_IF_NONE)
    # pasted text only: the user-space driver a start-up line names beside the description (Vulkan's driverName:
    # `radv`, `NVIDIA`, `Dozen`); not part of ggml's description, so kept apart
    driver: str | None = field(default=None, metadata=OMIT_IF_NONE)

    def to_json(self) -> dict[str, object]:
        """Every field (states by their value); the role's basis and reason only where something told the role
        (older files lack them)."""
        return {
            k: v.value if isinstance(v, Enum) else v
            for k, v in asdict(self).items()
            if v is not None or k not in _SAID_WHEN_TOLD
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Device:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "type" in known:
            known["type"] = Role(known["type"])
        if known.get("role_basis") is not None:
            known["role_basis"] = RoleBasis(known["role_basis"])
        return cls(**known)


@dataclass(frozen=True)
class DrmCard:
    """A GPU as the kernel sees it: which driver holds it, even when no user-space API lists it."""

    card: str
    driver: str
    pci_bus_id: str | None
    vendor: str  # PCI vendor id


class State(Enum):
    """What llama.cpp does with a device when no -dev is given."""

    USED = "used"
    SKIPPED = "skipped"
    UNUSED = "unused"
    NOT_A_DEV = "not a -dev"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Selection:
    state: State
    reason: str = ""  # why, for people: the name that already holds the same device id …

    @property
    def used(self) -> bool:
        return self.state is State.USED

    def sentence(self) -> str:
        """As the inventory's `default_selection` spells it: 'used', 'skipped: same device id as <name>' …"""
        if self.state is State.USED:
            return f"used ({self.reason})" if self.reason else "used"
        return f"{self.state.value}: {self.reason}" if self.reason else self.state.value


def one_to_one(devices: list[Any], rows: list[Any], same: Callable[[Any, Any], bool]) -> dict[str, Any]:
    """Device name → the one row (of nvidia-smi, vulkaninfo …) it matches, where that row matches no other device."""
    matches = {d.name: [r for r in rows if same(d, r)] for d in devices}
    claimed = Counter(id(r) for found in matches.values() for r in found)
    return {name: found[0] for name, found in matches.items() if len(found) == 1 and claimed[id(found[0])] == 1}
