"""Stage 9: the per-host device inventory, `<data>/inventory/<hostname>.json`.

Per build: the backends it was compiled with (from its receipt) and the devices its last probe
found, with the time and the environment of that probe. A failed probe is recorded with its reason
and keeps the last good result. Written atomically under a lock; a corrupt file is moved aside.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path

from buildmgr import backends, hostfacts, identity, proc, store
from buildmgr.config import Dirs
from buildmgr.errors import UserError
from buildmgr.fsutil import atomic_write_text, locked
from buildmgr.probe import (
    Device,
    DrmCard,
    NvidiaGpu,
    ProbeResult,
    VulkanGpu,
    enumeration_env,
    parse_nvidia_smi_csv,
    parse_vulkaninfo_summary,
    probe_build,
    read_drm_cards,
)

SCHEMA = 1
# One nvidia-smi call: the columns parse_nvidia_smi_csv reads, then the driver version.
NVIDIA_QUERY = ["--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version", "--format=csv,noheader"]
VULKANINFO_SKIPPED = "not run: ggml gave every Vulkan device a PCI id"


def path_for(dirs: Dirs) -> Path:
    return dirs.inventory / f"{hostfacts.read().hostname}.json"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _capture(command: list[str]) -> str:
    if shutil.which(command[0]) is None:
        return ""
    ran = proc.run(command, timeout=30)
    return ran.stdout if ran.ok else ""


def nvidia_smi() -> list[NvidiaGpu]:
    """nvidia-smi's GPUs, with the driver version (empty where it is missing)."""
    return parse_nvidia_smi_csv(_capture(["nvidia-smi", *NVIDIA_QUERY]))


def vulkaninfo_needed(builds: dict) -> bool:
    """vulkaninfo (slow: it starts every Vulkan driver) only adds what ggml cannot say: a Vulkan device without a
    PCI id (a CPU driver such as lavapipe), or why a Vulkan build sees no device at all."""
    for entry in builds.values():
        if "Vulkan" in entry.get("backends", []):
            vulkan = [d for d in _devices_of(entry) if d.backend == "Vulkan"]
            if not vulkan or any(d.pci_bus_id is None for d in vulkan):
                return True
    return False


def vulkaninfo() -> list[VulkanGpu]:
    return parse_vulkaninfo_summary(_capture(["vulkaninfo", "--summary"]))


def describe_host(nvidia: list[NvidiaGpu], vulkan: list[VulkanGpu] | None, drm: list[DrmCard]) -> dict[str, object]:
    return hostfacts.read().inventory_json() | {
        "drivers": {
            "nvidia": nvidia[0].driver if nvidia else None,
            "vulkan_devices": [asdict(g) for g in vulkan] if vulkan is not None else VULKANINFO_SKIPPED,
            "kernel_gpus": [asdict(card) for card in drm],
        },
        "nvidia_gpus": [asdict(g) for g in nvidia],
    }


# --- reading and writing ---------------------------------------------------------------------


def load(path: Path, warn=lambda message: None) -> dict:
    """The stored inventory; a corrupt file is moved aside (never silently dropped) and reported."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        schema = data.get("schema") if isinstance(data, dict) else None
        if isinstance(schema, int) and schema > SCHEMA:
            raise UserError(
                f"inventory {path} was written by a newer buildmgr (schema {schema}, this one reads {SCHEMA}); "
                "upgrade buildmgr, or set XDG_DATA_HOME to use another inventory"
            )
        if (
            schema == SCHEMA
            and isinstance(data.get("builds"), dict)
            and all(isinstance(e, dict) for e in data["builds"].values())
        ):
            return data
        problem = f"unknown schema {schema!r}" if schema != SCHEMA else "'builds' is not a map of build entries"
    except FileNotFoundError:
        return {"schema": SCHEMA, "builds": {}}
    except (OSError, ValueError) as err:
        problem = str(err)
    aside = path.with_name(f"{path.name}.corrupt-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}")
    os.replace(path, aside)
    warn(f"inventory {path} was unreadable ({problem}); moved aside to {aside}")
    return {"schema": SCHEMA, "builds": {}}


def _probe_record(result: ProbeResult) -> dict[str, object]:
    return {
        "ok": result.ok,
        "time": _now(),
        "seconds": result.seconds,
        "tool": result.tool,
        "env": result.env,
        "error": result.error,
        "method": result.method,
        "api_error": result.api_error,
        "mismatches": list(result.mismatches),
        "devices": [d.to_json() for d in result.devices],
    }


def record_probe(data: dict, build: store.Build, result: ProbeResult) -> None:
    """Pure update of one build's entry: a failed probe keeps the last good one."""
    entry = data["builds"].get(build.id, {})
    record = _probe_record(result)
    entry.update(
        {
            "recipe": build.recipe,
            "prefix": str(build.prefix),
            "backends": build.receipt["recipe"]["backends"],
            "probe": record,
        }
    )
    if result.ok:
        entry["last_good"] = record
    data["builds"][build.id] = entry


def _devices_of(entry: dict) -> list[Device]:
    return [Device.from_json(d) for d in (entry.get("last_good") or {}).get("devices", [])]


def _same(a: Device, b: Device) -> bool:
    """One name in two builds is one device unless their hardware ids say otherwise."""
    return a.name == b.name and (a.pci_bus_id is None or b.pci_bus_id is None or a.pci_bus_id == b.pci_bus_id)


def absence_reasons(
    backends_built: list[str], seen: set[str], env: dict[str, str], vulkan: list[VulkanGpu], nvidia: list[NvidiaGpu]
) -> list[str]:
    """Why a compiled backend shows no device here: 'built ≠ present', explained where its module can."""
    reasons = []
    for name in backends_built:
        why = None if name in seen else backends.why_absent(name, env, vulkan, nvidia)
        if why is not None:
            reasons.append(f"{name}: built ≠ present: {why}")
    return reasons


def summarize(data: dict, nvidia: list[NvidiaGpu], vulkan: list[VulkanGpu], drm: list[DrmCard] = ()) -> dict:
    """Identity over every build's devices, the per-card view, and notes (pure over `data`)."""
    union: list[Device] = []
    for entry in data["builds"].values():
        union += [d for d in _devices_of(entry) if not any(_same(d, u) for u in union)]
    renamed = sorted({d.name for d in union if sum(u.name == d.name for u in union) > 1})
    union = [replace(d, name=f"{d.name}@{d.pci_bus_id}") if d.name in renamed else d for d in union]
    devices, notes = identity.resolve(union, nvidia, vulkan, drm)
    notes += [
        f"{name} is a different card in different builds (probed under different environments): "
        "'buildmgr devices --refresh' probes them all under this one"
        for name in renamed
    ]
    for build_id, entry in sorted(data["builds"].items()):
        seen = {d.backend for d in _devices_of(entry)}
        env = (entry.get("probe") or {}).get("env", {})
        entry["absent"] = absence_reasons(entry["backends"], seen, env, vulkan, nvidia)
        notes += [f"{build_id}: {reason}" for reason in entry["absent"]]
        probe = entry["probe"]
        if not probe["ok"]:
            notes.append(f"{build_id}: last probe failed ({probe['error']}); showing the last good one")
        elif probe.get("method") == "list-devices":
            notes.append(
                f"{build_id}: ggml's device API could not be read ({probe.get('api_error')}); "
                "names and memory come from --list-devices, without PCI ids or device types"
            )
        notes += [f"{build_id}: {m}" for m in probe.get("mismatches", [])]
        entry["default_selection"] = identity.default_selection(_devices_of(entry))
    data["devices"] = [d.to_json() | {"moves_with": list(backends.moves_with(d.backend))} for d in devices]
    data["cards"] = cards(devices, data["builds"])
    data["notes"] = notes
    return data


def cards(devices: list[Device], builds: dict) -> list[dict]:
    """One row per physical card: its names in each build, and the one each build uses when no -dev is given."""
    rows: dict[str, dict] = {}
    for device in devices:
        row = rows.setdefault(
            device.physical_id,
            {
                "physical_id": device.physical_id,
                "description": device.description,
                "role": device.type,
                "pci_bus_id": device.pci_bus_id,
                "uuid": device.uuid,
                "kernel_driver": device.kernel_driver,
                "memory_total_mib": {},
                "names": {},
                "default": {},
            },
        )
        row["pci_bus_id"] = row["pci_bus_id"] or device.pci_bus_id
        row["uuid"] = row["uuid"] or device.uuid
        row["memory_total_mib"][device.backend] = device.memory_total_mib
    by_name = {d.name: d for d in devices}
    for build_id, entry in builds.items():
        for listed in _devices_of(entry):
            device = by_name.get(listed.name) or by_name.get(f"{listed.name}@{listed.pci_bus_id}")
            if device is None:
                continue
            row = rows[device.physical_id]
            row["names"].setdefault(build_id, []).append(listed.name)
            verdict = entry.get("default_selection", {}).get(listed.name, "")
            if verdict.startswith("used"):
                row["default"][build_id] = listed.name
    return list(rows.values())


def environment_changes(data: dict, environ: dict[str, str]) -> list[str]:
    """The names were probed under one environment; under another they may mean other cards."""
    changed = []
    for build_id, entry in sorted(data["builds"].items()):
        relevant = {v for b in entry.get("backends", []) for v in backends.moves_with(b)}
        then = {k: v for k, v in (entry.get("probe") or {}).get("env", {}).items() if k in relevant}
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


def _probe_all(builds: list[store.Build], environ: dict[str, str]):
    """Every build's probe and nvidia-smi at once: each waits on driver start-up, not on the others."""
    with ThreadPoolExecutor(max_workers=len(builds) + 1) as pool:
        nvidia = pool.submit(nvidia_smi)
        probes = {b.id: pool.submit(probe_build, b.prefix, environ) for b in builds}
        return {k: f.result() for k, f in probes.items()}, nvidia.result()


def refresh(
    dirs: Dirs, builds: list[store.Build], warn=lambda message: None, environ: dict[str, str] | None = None
) -> dict:
    """Probe the given builds, merge into the stored inventory, and write it back atomically under a lock."""
    environ = dict(os.environ if environ is None else environ)
    results, nvidia = _probe_all(builds, environ)
    path = path_for(dirs)
    with locked(path.with_suffix(".lock")):
        data = load(path, warn)
        installed = {b.id for b in store.installed(dirs)}
        data["builds"] = {k: v for k, v in data.get("builds", {}).items() if k in installed}
        for build in builds:
            record_probe(data, build, results[build.id])
        vulkan = vulkaninfo() if vulkaninfo_needed(data["builds"]) else None
        drm = read_drm_cards()
        host = describe_host(nvidia, vulkan, drm)
        data.update(schema=SCHEMA, updated=_now(), host=host, probe_env=enumeration_env(environ))
        summarize(data, nvidia, vulkan or [], drm)
        atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def preview(builds: list[store.Build], environ: dict[str, str]) -> dict:
    """What the names would be under another environment: a fresh probe of every build, stored nowhere."""
    results, nvidia = _probe_all(builds, environ)
    data: dict = {"schema": SCHEMA, "builds": {}, "preview_env": enumeration_env(environ)}
    for build in builds:
        record_probe(data, build, results[build.id])
    return summarize(data, nvidia, vulkaninfo() if vulkaninfo_needed(data["builds"]) else [], read_drm_cards())


def build_devices(data: dict, build_id: str) -> list[Device]:
    """One build's devices from its last good probe, with the identity and role the summary gave them."""
    summary = {(d["name"].split("@")[0], d.get("pci_bus_id")): d for d in data.get("devices", [])}
    devices = []
    for device in _devices_of(data["builds"].get(build_id, {})):
        known = summary.get((device.name, device.pci_bus_id), {})
        devices.append(
            replace(
                device,
                physical_id=known.get("physical_id", f"alone:{device.name}"),
                type=known.get("type", device.type),
            )
        )
    return devices


def read(dirs: Dirs, warn=lambda message: None) -> dict | None:
    """The stored inventory, read under its lock (a writer may be replacing it), or None if there is none."""
    path = path_for(dirs)
    if not path.exists():
        return None
    with locked(path.with_suffix(".lock")):
        return load(path, warn)


def placement_view(
    dirs: Dirs, build: store.Build, environ: dict[str, str]
) -> tuple[list[Device], dict[str, str], dict[str, str], bool]:
    """One build's devices under the current environment, for the placement check.

    The stored probe serves when its enumeration variables are today's; otherwise the build is probed afresh,
    and names that now mean another card than at the stored probe are returned in `moved` (name → old id).
    Returns (devices with physical ids, llama.cpp's default verdicts, moved, probed afresh).
    """
    data = read(dirs) or {"schema": SCHEMA, "builds": {}}
    entry = data["builds"].get(build.id)
    stored = {d.name: d for d in build_devices(data, build.id)}
    if entry is not None and not environment_changes({"builds": {build.id: entry}}, environ):
        devices = list(stored.values())
        return devices, identity.default_selection(devices), {}, False
    result = probe_build(build.prefix, environ)
    devices, _ = identity.assign_physical_ids(list(result.devices))
    moved = {
        d.name: stored[d.name].physical_id
        for d in devices
        if d.name in stored and d.pci_bus_id and stored[d.name].pci_bus_id and stored[d.name].pci_bus_id != d.pci_bus_id
    }
    return devices, identity.default_selection(devices), moved, True
