"""Which device names are one physical card, what role each plays, and which name llama.cpp would use.
Pure functions.

Identity, strongest first:
0. devices a backend emulates on one card (ggml-cuda's GGML_CUDA_DEVICES: "NAME (dev p0/v1)", device id
   "PCI-v1") are that card, by the card's own PCI id or, in text without one, by the physical device they name;
1. the PCI bus id ggml itself reports (`device_id`, from the API probe), or a UUID / PCI bus id that
   nvidia-smi or vulkaninfo tie to exactly one device;
2. a layered driver that names the card it runs on (Dozen: "Microsoft Direct3D12 (NAME)") and exactly one other
   device of that name: "grouped by name", the one pairing allowed within one backend;
3. only where no device of a pair has a hardware id (captured text, or a probe that fell back): the same
   description once its trailing parentheses are removed, one such device per backend, and total memory within
   5 % or 512 MiB (or one card seen through two drivers: a codename's parenthesis, such as an APU's iGPU under
   RADV and ROCm, or a driver a start-up line names, `Device.driver`). Each such pairing is said in a note;
4. otherwise the device stands alone. Two devices of one backend never share an id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from buildmgr import backends
from buildmgr.backends import NOT_A_CARD
from buildmgr.core.device_records import (
    Captures,
    Device,
    DrmCard,
    Role,
    RoleBasis,
    Selection,
    State,
    alone_id,
    hardware_id,
    matched_id,
    normalize_pci,
    plain_description,
)

MEMORY_TOLERANCE = 0.05
MEMORY_SLACK_MIB = 512
# Hardware ids seen through both backends are the best identity; the order picks the id's spelling.
_HARDWARE_KEYS = ("pci_bus_id", "uuid")


def memory_close(a: int | None, b: int | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= max(MEMORY_SLACK_MIB, MEMORY_TOLERANCE * max(a, b))


def enrich(devices: list[Device], captures: Captures, drm: Sequence[DrmCard] = ()) -> tuple[list[Device], list[str]]:
    """Add UUID, PCI bus id and role from each vendor tool's capture (matched by its backend's module, in the
    backends' order) and the kernel driver from sysfs, only where a match is one to one."""
    notes: list[str] = []
    matched = devices
    for name, capture in backends.captures():
        matched = capture.match(matched, list(captures.get(name, [])), notes)
    drivers = {normalize_pci(c.pci_bus_id): c.driver for c in drm if c.pci_bus_id}
    return [replace(d, kernel_driver=drivers[d.pci_bus_id]) if d.pci_bus_id in drivers else d for d in matched], notes


def _hardware(device: Device, key: str) -> str | None:
    """The device's hardware id of that kind: an emulated device's is its card's."""
    value: str | None = getattr(device, key)
    return backends.physical_pci(device.backend, value) if key == "pci_bus_id" else value


def card_pci(device: Device) -> str | None:
    """The PCI id of the card the device is (an emulated device's card's)."""
    return _hardware(device, "pci_bus_id")


def _keys(device: Device) -> set[str]:
    return {f"{k}:{_hardware(device, k)}" for k in _HARDWARE_KEYS if getattr(device, k)}


def _alike(a: Device, b: Device, memory: Callable[[Device], int | None]) -> bool:
    """One card by description and memory (`memory`: a virtual device's is its card's, all its shares), or by a name
    seen through two drivers: the descriptions differ by a parenthesis (RADV's codename) or the drivers differ."""
    first, second = (backends.card_description(d.backend, d.description) for d in (a, b))
    if plain_description(first) != plain_description(second):
        return False
    through_two_drivers = first.strip().lower() != second.strip().lower() or a.driver != b.driver
    return memory_close(memory(a), memory(b)) or through_two_drivers


def assign_physical_ids(devices: list[Device]) -> tuple[list[Device], list[str]]:
    """Give every device a physical_id; returns the devices and notes on pairings made or left unknown."""
    parent = {d.name: d.name for d in devices}

    def root(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    def backends_of(name: str) -> set[str]:
        top = root(name)
        return {d.backend for d in devices if root(d.name) == top}

    def join(a: Device, b: Device, within_backend: bool = False) -> bool:
        if root(a.name) == root(b.name) or (backends_of(a.name) & backends_of(b.name) and not within_backend):
            return False
        parent[root(b.name)] = root(a.name)
        return True

    notes = _group_virtual(devices, join)
    for a in devices:  # 1. hardware ids
        for b in devices:
            if a.backend != b.backend and _keys(a) & _keys(b):
                join(a, b)
    pairable = [d for d in devices if d.backend not in NOT_A_CARD]

    def card_memory(device: Device) -> int | None:
        if backends.virtual_tag(device.backend, device.description) is None:
            return device.memory_total_mib
        shares = [
            d.memory_total_mib for d in devices if d.backend == device.backend and root(d.name) == root(device.name)
        ]
        return None if None in shares else sum(s for s in shares if s is not None)

    def cards(group: list[Device]) -> int:  # the virtual devices of one card are one
        return len({root(d.name) for d in group})

    for a in pairable:  # 2. description and memory, unambiguous both ways, where hardware ids cannot decide
        for backend in sorted({d.backend for d in pairable} - {a.backend}):
            mine = [d for d in pairable if d.backend == backend and _alike(a, d, card_memory)]
            theirs = [d for d in pairable if d.backend == a.backend and mine and _alike(mine[0], d, card_memory)]
            if cards(mine) == 1 and cards(theirs) == 1:
                if not (_keys(a) and _keys(mine[0])) and join(a, mine[0]):
                    notes.append(f"{a.name} ≡ {mine[0].name} by description and memory only (no hardware id for both)")
            elif mine and not all(_keys(d) for d in mine + theirs):
                names = ", ".join(sorted(d.name for d in mine + theirs))
                tools = "/".join(capture.command[0] for _, capture in backends.captures())
                notes.append(
                    f"pairing unknown: {names} look alike (same name and memory); PCI ids from ggml's API "
                    f"(buildmgr devices --refresh on that host) or UUIDs from {tools} would tell them apart"
                )
    notes += _group_layered(devices, root, join)
    ids = {}
    for device in devices:
        members = sorted((d for d in devices if root(d.name) == root(device.name)), key=lambda d: d.name)
        keyed = next(
            (
                hardware_id(k.removesuffix("_bus_id"), value)
                for k in _HARDWARE_KEYS
                for m in members
                if (value := _hardware(m, k))
            ),
            None,
        )
        ids[device.name] = keyed or (matched_id(m.name for m in members) if len(members) > 1 else alone_id(device.name))
    result = [replace(d, physical_id=ids[d.name]) for d in devices]
    return _share_roles(result), sorted(set(notes))


def _group_virtual(devices: list[Device], join: Callable[..., bool]) -> list[str]:
    """A backend's emulated devices on one physical device join: the one pairing within a backend that its own
    names prove (two real cards of one model are never joined)."""
    cards: dict[tuple[str, str], list[Device]] = {}
    reasons: dict[tuple[str, str], str] = {}
    for device in devices:
        tag = backends.virtual_tag(device.backend, device.description)
        if tag is not None:
            cards.setdefault((device.backend, tag[0]), []).append(device)
            reasons[(device.backend, tag[0])] = tag[1].reason
    notes = []
    for (backend, physical), members in cards.items():
        for other in members[1:]:
            join(members[0], other, within_backend=True)
        if len(members) > 1:
            pcis = {_hardware(m, "pci_bus_id") for m in members}
            card = (
                f"pci:{pcis.pop()}" if len(pcis) == 1 and None not in pcis else f"{backend} physical device {physical}"
            )
            names = ", ".join(m.name for m in members)
            notes.append(f"{names} are virtual devices of one card ({card}): {reasons[(backend, physical)]}")
    return notes


def _group_layered(devices: list[Device], root: Callable[[str], str], join: Callable[..., bool]) -> list[str]:
    """A layered driver's device joins the one card it names; identical cards of that name are never guessed between."""
    notes = []
    for device in devices:
        layered = backends.layered_card(device.description)
        if layered is None:
            continue
        card, driver = layered
        hosts = [
            d
            for d in devices
            if d is not device
            and backends.layered_card(d.description) is None
            and plain_description(d.description) == plain_description(card)
        ]
        cards = sorted({root(d.name) for d in hosts})
        if len(cards) == 1 and join(hosts[0], device, within_backend=True):
            notes.append(f"{device.name} ≡ {hosts[0].name}: grouped by name ({driver.reason})")
        elif len(cards) > 1:
            names = ", ".join(sorted(d.name for d in hosts))
            notes.append(
                f"{device.name} runs on a {card}, which {names} all are: not grouped (identical cards are never merged)"
            )
    return notes


def _share_roles(devices: list[Device]) -> list[Device]:
    """One card has one role: the most specific any of its names got (an iGPU through one backend is one through every other)."""
    precedence = (Role.CPU, Role.REMOTE, Role.IGPU, Role.ACCEL, Role.GPU, Role.UNKNOWN)
    best: dict[str, Role] = {}
    for device in devices:
        current = best.get(device.physical_id, Role.UNKNOWN)
        best[device.physical_id] = min(current, device.type, key=precedence.index)
    return [replace(d, type=best[d.physical_id]) for d in devices]


def default_selection(devices: list[Device]) -> dict[str, Selection]:
    """What llama.cpp does with each device when no -dev is given (llama_prepare_model_devices at the pin).

    `devices` are one build's, in ggml's registry order. RPC servers and discrete GPUs are used, a GPU
    whose device_id an earlier GPU already has is skipped, and iGPUs (of the first iGPU's backend) are used
    only when no discrete GPU is. Without ggml's own types (a probe that fell back) the answer is unknown.
    """
    if any(d.ggml_type is None for d in devices):
        unread = Selection(State.UNKNOWN, "ggml's device types were not read (the API probe did not run)")
        return {d.name: unread for d in devices}
    verdicts: dict[str, Selection] = {}
    used_ids: dict[str, str] = {}
    igpus: list[Device] = []
    for device in devices:
        if device.ggml_type in ("cpu", "accel"):
            verdicts[device.name] = Selection(State.NOT_A_DEV, "works beside the CPU")
        elif device.ggml_type == "gpu" and NOT_A_CARD.get(device.backend) == Role.REMOTE:
            verdicts[device.name] = Selection(State.USED, "RPC server")
        elif device.ggml_type == "gpu":
            earlier = used_ids.get(device.device_id) if device.device_id else None
            if earlier:
                verdicts[device.name] = Selection(State.SKIPPED, f"same device id as {earlier}")
            else:
                verdicts[device.name] = Selection(State.USED)
                if device.device_id:
                    used_ids[device.device_id] = device.name
        elif device.ggml_type == "igpu":
            if not igpus or igpus[-1].backend == device.backend:
                igpus.append(device)
            else:
                verdicts[device.name] = Selection(State.SKIPPED, f"iGPU already used through {igpus[0].backend}")
    discrete = any(v == Selection(State.USED) for v in verdicts.values())
    for device in igpus:
        verdicts[device.name] = (
            Selection(State.UNUSED, "iGPUs are used only when there is no discrete GPU")
            if discrete
            else Selection(State.USED)
        )
    return {d.name: verdicts.get(d.name, Selection(State.UNKNOWN, f"ggml type {d.ggml_type}")) for d in devices}


def role_notes(devices: list[Device]) -> list[str]:
    """Name the iGPU plainly, the largest discrete card of each backend, and every role left unknown."""
    notes = [f"iGPU = {d.name} ({d.description})" for d in devices if d.type == Role.IGPU]
    notes += [
        f"{d.name}: named {d.type} from its name: {d.role_reason}" for d in devices if d.role_basis == RoleBasis.NAME
    ]
    notes += [f"{d.name}: {d.type} from the log: {d.role_reason}" for d in devices if d.role_basis == RoleBasis.LOG]
    for backend in sorted({d.backend for d in devices}):
        first: dict[str, Device] = {}  # one name per card: virtual devices of one card are not cards of their own
        for d in devices:
            if d.backend == backend and d.type == Role.GPU:
                first.setdefault(d.physical_id, d)
        cards = list(first.values())
        if len(cards) > 1 or (cards and len({d.physical_id for d in devices if d.backend == backend}) > 1):
            largest = max(d.memory_total_mib or 0 for d in cards)
            top = [d.name for d in cards if (d.memory_total_mib or 0) == largest]
            notes.append(
                f"{backend}: largest discrete card {top[0]} ({largest} MiB)"
                if len(top) == 1
                else f"{backend}: {', '.join(top)} are equal discrete cards ({largest} MiB each)"
            )
    unknown = [d.name for d in devices if d.type == Role.UNKNOWN]
    if unknown:  # one line for all: four cards of a pasted log are one fact, not four lines
        notes.append(
            f"{', '.join(unknown)}: role unknown (ggml's type not read, no vulkaninfo match, no log line or known name "
            "tells it); not assumed to be discrete"
        )
    return notes


def resolve(devices: list[Device], captures: Captures, drm: Sequence[DrmCard] = ()) -> tuple[list[Device], list[str]]:
    enriched, notes = enrich(devices, captures, drm)
    identified, pairing = assign_physical_ids(enriched)
    return identified, notes + pairing + role_notes(identified)
