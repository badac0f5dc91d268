"""A device as a text tells of it, assembled line by line (`Draft`, in a `Reading`), then made a `Device` with
the role text can tell (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import IntEnum

from buildmgr import backends
from buildmgr.core.device_records import Device, Role, RoleBasis, normalize_pci, plain_description


class Rank(IntEnum):
    """Where a record's description comes from, best first: ggml's own description over a start-up line's (which
    may trim it), Ollama's last; memory from whichever printed it."""

    BLOCK = 0
    OPS = 1
    LOAD = 2
    INIT = 3
    TABLE = 4
    OLLAMA = 5


@dataclass(frozen=True)
class Parsed:
    """What a pasted text says about devices: each once, the shapes it was read from, and notes on the text."""

    devices: tuple[Device, ...]
    shapes: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass
class Draft:
    name: str
    backend: str
    index: int | None
    description: str = ""
    rank: int = Rank.OLLAMA + 1
    total: int | None = None
    free: int | None = None
    rough: tuple[bool, bool] = (False, False)  # (total, free) came from a value rounded to 0.1 GiB: any other wins
    pci: str | None = None
    role: tuple[Role, str] | None = None  # (role, reason) a line of the text tells
    separate: str | None = None  # why a line says it is no integrated device (a discrete card, unless a CPU's name)
    detail: str = ""  # more of its name a line printed (ROCm's gfx target)
    listed: bool = False
    run: int = 0  # which run of a program in the text printed it
    driver: str | None = None  # the driver a start-up line names beside the description

    def add(
        self,
        rank: int,
        description: str | None = None,
        total: str | int | None = None,
        free: str | int | None = None,
        pci: str | None = None,
        rough: bool = False,
    ) -> None:
        if description and rank < self.rank:
            self.description, self.rank = description.strip(), rank
        total_rough, free_rough = self.rough
        if total is not None and (self.total is None or rank == Rank.BLOCK or total_rough > rough):
            self.total, total_rough = int(total), rough
        if free is not None and (self.free is None or rank == Rank.BLOCK or free_rough > rough):
            self.free, free_rough = int(free), rough
        self.rough = (total_rough, free_rough)
        self.pci = self.pci or normalize_pci(pci)
        self.listed = self.listed or rank == Rank.BLOCK


@dataclass
class Reading:
    runs: list[int]  # the run of each line
    builds: dict[int, int] = field(default_factory=dict)  # the build number each run's build line gives
    records: dict[tuple[int, str, str], Draft] = field(default_factory=dict)
    shapes: list[str] = field(default_factory=list)

    def record(
        self,
        line: int,
        name: str,
        backend: str | None = None,
        description: str = "",
        again: int = 0,
        ident: str | None = None,
    ) -> Draft:
        """The record of a device a line names, in that line's run (`again`: the how-manieth alike line of one list
        this is, where each line is a device of its own; `ident`: what tells a device without an index apart where its
        description cannot, such as Ollama's id)."""
        number = re.search(r"(\d+)$", name)
        backend = backend or (name[: number.start()] if number else name)
        run = self.runs[line]
        # Names without an index (GPUOpenCL, Metal) may stand for several devices: their description tells them apart.
        told = ident if ident is not None else plain_description(description) + (f"#{again}" if again else "")
        key = (run, name, "") if number else (run, name, told)
        if key not in self.records:
            self.records[key] = Draft(name, backend, int(number.group(1)) if number else None, run=run)
        return self.records[key]

    def saw(self, shape: str) -> None:
        if shape not in self.shapes:
            self.shapes.append(shape)


# ggml's device types that are roles as they are ("meta" and anything newer are not)
_GGML_ROLES = {role.value: role for role in (Role.GPU, Role.IGPU, Role.ACCEL, Role.CPU)}


def role_of(backend: str, ggml_type: str | None) -> Role:
    """The device's role from ggml's own type, except for a device that is not a card (CPU, BLAS, RPC)."""
    if backend in backends.NOT_A_CARD:
        return backends.NOT_A_CARD[backend]
    return _GGML_ROLES.get(ggml_type or "", Role.UNKNOWN)


def with_role(
    device: Device, told: tuple[Role, str] | None = None, detail: str = "", separate: str | None = None
) -> Device:
    """The device with a role where ggml's type leaves it unknown: a device that is not a card, what a line of the
    text told, else a family known from its name (and the detail a line printed with it, such as a gfx target), else
    a discrete card where a line says it is no integrated one (`separate`: Vulkan's uma: 0). A discrete card is never
    concluded from a name alone."""
    if device.backend in backends.NOT_A_CARD:
        return replace(device, type=backends.NOT_A_CARD[device.backend], role_basis=RoleBasis.BACKEND)
    if device.type != Role.UNKNOWN:
        return device
    if told is not None:
        return replace(device, type=told[0], role_basis=RoleBasis.LOG, role_reason=told[1])
    # the name as its line printed it, driver included: a driver's name tells a family too (llvmpipe's is `llvmpipe`)
    printed = f"{device.description} ({device.driver})" if device.driver else device.description
    family = backends.name_role(f"{printed} {detail}".strip())
    if family is None:
        if separate is not None:
            return replace(device, type=Role.GPU, role_basis=RoleBasis.LOG, role_reason=separate)
        return device
    return replace(device, type=family.role, role_basis=RoleBasis.NAME, role_reason=family.reason)


def to_device(record: Draft) -> Device:
    device = Device(
        record.name,
        record.backend,
        record.index,
        record.description,
        record.total,
        record.free,
        pci_bus_id=record.pci,
        source="list-devices" if record.listed else "log",
        run=record.run,
        driver=record.driver,
    )
    return with_role(device, record.role, record.detail, record.separate)
