"""The per-host device inventory, `<data>/inventory/<hostname>.json`.

Per build: the backends it was compiled with (from its receipt) and the devices its last probe
found, with the time and the environment of that probe. A failed probe is recorded with its reason
and keeps the last good result. Written atomically under a lock; a corrupt file is moved aside.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from buildmgr import backends, store
from buildmgr.core import hostfacts
from buildmgr.core.config import Dirs
from buildmgr.core.device_records import Captures, Device, DrmCard, Selection, alone_id, plain_name, qualified
from buildmgr.core.errors import Unreachable, UserError
from buildmgr.core.fsutil import atomic_write_text, locked
from buildmgr.core.jsonshape import NewerSchema, ShapeError
from buildmgr.devices import identity
from buildmgr.devices.inventory_file import BuildEntry, Inventory, InventoryCard, ProbeRecord
from buildmgr.devices.probe import ProbeResult, enumeration_env, probe_build, read_drm_cards, run_capture


def path_for(dirs: Dirs) -> Path:
    return dirs.inventory / f"{hostfacts.read().hostname}.json"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def captures_wanted(builds: Mapping[str, BuildEntry]) -> list[str]:
    """The backends whose vendor tool adds something to what these builds' probes found."""
    seen = [(entry.backends, entry.devices) for entry in builds.values()]
    return [name for name, capture in backends.captures() if capture.wanted(seen)]


def describe_host(captures: Captures, drm: Sequence[DrmCard]) -> dict[str, object]:
    """The inventory's `host`: this host's facts, what each vendor tool said (or that it was not run), its GPUs."""
    described: dict[str, Any] = hostfacts.read().inventory_json() | {"drivers": {}}
    for name, capture in backends.captures():
        for key, value in capture.host_json(captures.get(name)).items():
            described[key] = described[key] | value if isinstance(value, dict) and key in described else value
    described["drivers"]["kernel_gpus"] = [asdict(card) for card in drm]
    return described


# --- reading and writing ---------------------------------------------------------------------


def load(path: Path, warn: Callable[[str], None] = lambda message: None) -> Inventory:
    """The stored inventory; one of the wrong shape is moved aside (never silently dropped) and reported."""
    try:
        return Inventory.from_text(path.read_bytes())
    except FileNotFoundError:
        return Inventory.empty()
    except NewerSchema as err:
        raise UserError(
            f"inventory {path}: {err}; upgrade buildmgr, or set XDG_DATA_HOME to use another inventory"
        ) from None
    except (ShapeError, OSError) as err:
        problem = str(err)
    aside = path.with_name(f"{path.name}.corrupt-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}")
    os.replace(path, aside)
    warn(f"inventory {path} was unreadable ({problem}); moved aside to {aside}")
    return Inventory.empty()


def _probe_record(result: ProbeResult) -> ProbeRecord:
    return ProbeRecord(
        ok=result.ok,
        time=_now(),
        seconds=result.seconds,
        tool=result.tool,
        env=dict(result.env),
        error=result.error,
        devices=tuple(result.devices),
        method=result.method,
        api_error=result.api_error,
        mismatches=tuple(result.mismatches),
    )


def record_probe(inventory: Inventory, build: store.Build, result: ProbeResult) -> Inventory:
    """One build's entry updated with a probe (pure): a failed probe keeps the last good one."""
    record = _probe_record(result)
    before = inventory.builds.get(build.id)
    last_good = record if result.ok else before.last_good if before is not None else None
    entry = BuildEntry(build.recipe, str(build.prefix), build.receipt.backends, record, last_good)
    return replace(inventory, builds=inventory.builds | {build.id: entry})


def _same(a: Device, b: Device) -> bool:
    """One name in two builds is one device unless their hardware ids say otherwise."""
    return a.name == b.name and (a.pci_bus_id is None or b.pci_bus_id is None or a.pci_bus_id == b.pci_bus_id)


def absence_reasons(
    backends_built: Sequence[str], seen: set[str], env: Mapping[str, str], captures: Captures
) -> list[str]:
    """Why a compiled backend shows no device here: 'built ≠ present', explained where its module can."""
    reasons = []
    for name in backends_built:
        why = None if name in seen else backends.why_absent(name, env, captures)
        if why is not None:
            reasons.append(f"{name}: built ≠ present: {why}")
    return reasons


def summarize(inventory: Inventory, captures: Captures, drm: Sequence[DrmCard] = ()) -> Inventory:
    """Identity over every build's devices, the per-card view, and notes (pure)."""
    union: list[Device] = []
    for entry in inventory.builds.values():
        union += [d for d in entry.devices if not any(_same(d, u) for u in union)]
    renamed = sorted({d.name for d in union if sum(u.name == d.name for u in union) > 1})
    union = [replace(d, name=qualified(d.name, d.pci_bus_id)) if d.name in renamed else d for d in union]
    devices, notes = identity.resolve(union, captures, drm)
    notes += [
        f"{name} is a different card in different builds (probed under different environments): "
        "'buildmgr devices --refresh' probes them all under this one"
        for name in renamed
    ]
    builds = {}
    selections = {}
    for build_id, entry in sorted(inventory.builds.items()):
        seen = {d.backend for d in entry.devices}
        absent = absence_reasons(entry.backends, seen, entry.probe.env, captures)
        notes += [f"{build_id}: {reason}" for reason in absent]
        probe = entry.probe
        if not probe.ok:
            notes.append(f"{build_id}: last probe failed ({probe.error}); showing the last good one")
        elif probe.method == "list-devices":
            notes.append(
                f"{build_id}: ggml's device API could not be read ({probe.api_error}); "
                "names and memory come from --list-devices, without PCI ids or device types"
            )
        notes += [f"{build_id}: {m}" for m in probe.mismatches]
        selections[build_id] = identity.default_selection(list(entry.devices))
        sentences = {name: selection.sentence() for name, selection in selections[build_id].items()}
        builds[build_id] = replace(entry, absent=tuple(absent), default_selection=sentences)
    found = cards(devices, builds, selections)
    return replace(inventory, builds=builds, devices=tuple(devices), cards=found, notes=tuple(notes))


def cards(
    devices: list[Device], builds: Mapping[str, BuildEntry], selections: Mapping[str, Mapping[str, Selection]]
) -> tuple[InventoryCard, ...]:
    """One row per physical card: its names in each build, and the one each build uses when no -dev is given."""
    rows: dict[str, dict[str, Any]] = {}
    shares: dict[tuple[str, str], int] = {}  # (card, backend) → the memory of its virtual devices, which share it
    for device in devices:
        row = rows.setdefault(
            device.physical_id,
            {
                "physical_id": device.physical_id,
                "description": backends.card_description(device.backend, device.description),
                "role": device.type,
                "pci_bus_id": identity.card_pci(device),
                "uuid": device.uuid,
                "kernel_driver": device.kernel_driver,
                "memory_total_mib": {},
                "names": {},
                "default": {},
                "members": (),
            },
        )
        row["members"] = (*row["members"], device.name)
        row["pci_bus_id"] = row["pci_bus_id"] or identity.card_pci(device)
        row["uuid"] = row["uuid"] or device.uuid
        if backends.virtual_tag(device.backend, device.description) and device.memory_total_mib is not None:
            key = (device.physical_id, device.backend)
            shares[key] = shares.get(key, 0) + device.memory_total_mib
            row["memory_total_mib"][device.backend] = shares[key]
        elif device.memory_total_mib is not None or device.backend not in row["memory_total_mib"]:
            row["memory_total_mib"][device.backend] = device.memory_total_mib
    by_name = {d.name: d for d in devices}
    for build_id, entry in builds.items():
        for listed in entry.devices:
            known = by_name.get(listed.name) or by_name.get(qualified(listed.name, listed.pci_bus_id))
            if known is None:
                continue
            row = rows[known.physical_id]
            row["names"][build_id] = (*row["names"].get(build_id, ()), listed.name)
            selection = selections.get(build_id, {}).get(listed.name)
            if selection is not None and selection.used:  # several: the virtual devices of one card
                used = row["default"].get(build_id)
                row["default"][build_id] = f"{used},{listed.name}" if used else listed.name
    return tuple(InventoryCard(**row) for row in rows.values())


def environment_changes(builds: Mapping[str, BuildEntry], environ: Mapping[str, str]) -> list[str]:
    """The names were probed under one environment; under another they may mean other cards."""
    changed = []
    for build_id, entry in sorted(builds.items()):
        relevant = {v for b in entry.backends for v in backends.moves_with(b)}
        then = {k: v for k, v in entry.probe.env.items() if k in relevant}
        now = {k: v for k, v in enumeration_env(environ).items() if k in relevant}
        if then != now:
            diff = ", ".join(
                f"{k}={then.get(k, '(unset)')!s} then, {now.get(k, '(unset)')!s} now"
                for k in sorted(set(then) | set(now))
                if then.get(k) != now.get(k)
            )
            changed.append(
                f"{build_id}: probed under another environment ({diff}): its names may mean other cards now; "
                "run 'buildmgr devices --refresh'"
            )
    return changed


def _probe_all(
    builds: list[store.Build],
    environ: Mapping[str, str],
    probed: Mapping[str, ProbeResult] | None = None,
    servers: tuple[str, ...] = (),
) -> tuple[dict[str, ProbeResult], dict[str, Any]]:
    """Every build's probe and each vendor tool wanted whatever the probes find, at once: each waits on driver
    start-up, not on the others. `probed`: builds probed a moment ago under this environment (their smoke run's)."""
    # a probe that failed or could not use ggml's API is asked again, of the published prefix (its error may name
    # the staging folder, and a smoke run's busy moment is no verdict)
    known = {k: v for k, v in (probed or {}).items() if v.ok and not v.api_error}
    early = [(name, capture) for name, capture in backends.captures() if capture.wanted(())]
    with ThreadPoolExecutor(max_workers=len(builds) + len(early) + 1) as pool:
        captured = {name: pool.submit(run_capture, capture, environ) for name, capture in early}
        probes = {
            b.id: pool.submit(probe_build, b.prefix, environ, servers=servers) for b in builds if b.id not in known
        }
        return known | {k: f.result() for k, f in probes.items()}, {k: f.result() for k, f in captured.items()}


def _complete_captures(
    captured: dict[str, Any], builds: Mapping[str, BuildEntry], environ: Mapping[str, str]
) -> dict[str, Any]:
    """The captures run beside the probes, and those the probes' results call for."""
    known = dict(backends.captures())
    wanted = captures_wanted(builds)
    return captured | {name: run_capture(known[name], environ) for name in wanted if name not in captured}


def refresh(
    dirs: Dirs,
    builds: list[store.Build],
    environ: Mapping[str, str],
    warn: Callable[[str], None] = lambda message: None,
    probed: Mapping[str, ProbeResult] | None = None,
) -> Inventory:
    """Probe the given builds (but those in `probed`, by id), merge into the stored inventory, and write it back
    atomically under a lock."""
    results, captured = _probe_all(builds, environ, probed)
    path = path_for(dirs)
    with locked(path.with_suffix(".lock")):
        stored = load(path, warn)
        installed = {b.id for b in store.installed(dirs)}
        inventory = replace(stored, builds={k: v for k, v in stored.builds.items() if k in installed})
        for build in builds:
            inventory = record_probe(inventory, build, results[build.id])
        captured = _complete_captures(captured, inventory.builds, environ)
        drm = read_drm_cards()
        inventory = replace(
            inventory,
            updated=_now(),
            host=describe_host(captured, drm),
            probe_env=enumeration_env(environ),
        )
        inventory = summarize(inventory, captured, drm)
        atomic_write_text(path, inventory.to_text())
    return inventory


def preview(builds: list[store.Build], environ: Mapping[str, str], servers: tuple[str, ...] = ()) -> Inventory:
    """What the names would be under another environment, or with remote servers (HOST:PORT) added as a tool's
    --rpc adds them: a fresh probe of every build, stored nowhere."""
    results, captured = _probe_all(builds, environ, servers=servers)
    inventory = replace(Inventory.empty(), preview_env=enumeration_env(environ))
    for build in builds:
        inventory = record_probe(inventory, build, results[build.id])
    return summarize(inventory, _complete_captures(captured, inventory.builds, environ), read_drm_cards())


def build_devices(inventory: Inventory, build_id: str) -> list[Device]:
    """One build's devices from its last good probe, with the identity and role the summary gave them."""
    summary = {(plain_name(d.name), d.pci_bus_id): d for d in inventory.devices}
    devices = []
    entry = inventory.builds.get(build_id)
    for device in entry.devices if entry is not None else ():
        known = summary.get((device.name, device.pci_bus_id))
        devices.append(
            replace(
                device,
                physical_id=known.physical_id if known else alone_id(device.name),
                type=known.type if known else device.type,
            )
        )
    return devices


def read(dirs: Dirs, warn: Callable[[str], None] = lambda message: None) -> Inventory | None:
    """The stored inventory, read under its lock (a writer may be replacing it), or None if there is none."""
    path = path_for(dirs)
    if not path.exists():
        return None
    with locked(path.with_suffix(".lock")):
        return load(path, warn)


@dataclass(frozen=True)
class View:
    """One build's devices under the current environment, as the placement check needs them."""

    devices: tuple[Device, ...]  # with physical ids, registry order
    default: dict[str, Selection]  # what llama.cpp does with each without -dev
    moved: dict[str, str]  # name → the card it meant at the stored probe, where it now means another
    fresh: bool  # probed afresh (the stored probe was of another environment)


def placement_view(dirs: Dirs, build: store.Build, environ: Mapping[str, str], servers: tuple[str, ...] = ()) -> View:
    """The stored probe serves when its enumeration variables are today's and no remote server is named; otherwise
    the build is probed afresh (with `servers`' devices added as --rpc adds them; Unreachable where that probe
    fails), and names that now mean another card than at the stored probe are in `moved`."""
    inventory = read(dirs) or Inventory.empty()
    entry = inventory.builds.get(build.id)
    stored = {d.name: d for d in build_devices(inventory, build.id)}
    if entry is not None and not servers and not environment_changes({build.id: entry}, environ):
        devices = list(stored.values())
        return View(tuple(devices), identity.default_selection(devices), {}, False)
    result = probe_build(build.prefix, environ, servers=servers)
    if servers and not result.ok:
        raise Unreachable(f"{build.id} could not use the servers {','.join(servers)}: {result.error}")
    devices, _ = identity.assign_physical_ids(list(result.devices))
    return View(tuple(devices), identity.default_selection(devices), moved_names(stored, devices), True)


def moved_names(stored: Mapping[str, Device], devices: Sequence[Device]) -> dict[str, str]:
    """Name → the card it meant at the stored probe, for each name that now means another card (by the card's own
    PCI id: a virtual device of the card it was is still that card)."""
    return {
        d.name: stored[d.name].physical_id
        for d in devices
        if d.name in stored
        and (now := identity.card_pci(d))
        and (before := identity.card_pci(stored[d.name]))
        and now != before
    }
