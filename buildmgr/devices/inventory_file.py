"""The device inventory, `<data>/inventory/<hostname>.json`, typed and checked in one place (spec: "Inventory").

`Inventory.from_json` checks every field, so an inventory of the wrong shape is one clear reason (and the file is
moved aside by the reader), never a KeyError in `devices`, `refresh` or the placement check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from buildmgr.core import jsonshape
from buildmgr.core.device_records import Device, Role
from buildmgr.core.jsonshape import OMIT_IF_NONE

SCHEMA = 1


@dataclass(frozen=True)
class ProbeRecord:
    """One probe of one build: what it found, how, and under which enumeration variables."""

    ok: bool
    time: str
    seconds: float
    tool: str
    env: dict[str, str]
    error: str
    devices: tuple[Device, ...]
    method: str = ""  # ggml-api | list-devices (absent in inventories before the API probe)
    api_error: str = ""
    mismatches: tuple[str, ...] = ()


@dataclass(frozen=True)
class BuildEntry:
    recipe: str
    prefix: str
    backends: tuple[str, ...]
    probe: ProbeRecord
    last_good: ProbeRecord | None = field(default=None, metadata=OMIT_IF_NONE)  # a failed probe keeps this one
    absent: tuple[str, ...] = ()  # why a compiled backend shows no device here
    # name → what llama.cpp does without -dev, for people (devices.Selection.sentence); code uses the typed verdicts
    default_selection: dict[str, str] = field(default_factory=dict)

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices of the last good probe."""
        return self.last_good.devices if self.last_good is not None else ()


@dataclass(frozen=True)
class InventoryCard:
    """One physical card: its names in every build, and the one each build uses when no -dev is given."""

    physical_id: str
    description: str
    role: Role
    pci_bus_id: str | None
    uuid: str | None
    kernel_driver: str | None
    memory_total_mib: dict[str, int | None]  # per backend
    names: dict[str, tuple[str, ...]]  # per build
    default: dict[str, str]  # per build
    # every name of it, in any build (NAME@PCI where two cards share a name); absent in inventories before 2026-12-01
    members: tuple[str, ...] | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class Inventory(jsonshape.Record):
    VERSION = SCHEMA

    schema: int
    builds: dict[str, BuildEntry]
    devices: tuple[Device, ...] = ()  # every build's devices, with identity and role
    cards: tuple[InventoryCard, ...] = ()
    notes: tuple[str, ...] = ()
    updated: str | None = field(default=None, metadata=OMIT_IF_NONE)  # the stored inventory's
    host: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    probe_env: dict[str, str] | None = field(default=None, metadata=OMIT_IF_NONE)
    preview_env: dict[str, str] | None = field(default=None, metadata=OMIT_IF_NONE)  # `devices --env`: not stored

    @classmethod
    def empty(cls) -> Inventory:
        return cls(SCHEMA, {})

    def to_json(self) -> dict[str, Any]:
        from buildmgr.backends import moves_with

        data = super().to_json()
        for device in data["devices"]:  # which enumeration variables rename it: derived, never read back
            device["moves_with"] = list(moves_with(device["backend"]))
        return data
