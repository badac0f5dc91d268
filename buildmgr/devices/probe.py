"""What a build really sees here: its probe, run with a timeout (ggml's device API in a child, and the tool's
`--list-devices` beside it), the vendor tools' captures, and the kernel's GPUs in sysfs. The parsing is in
`captures` and in the backend modules."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from buildmgr import backends
from buildmgr.core import proc
from buildmgr.core.device_records import Device, DrmCard, Role, RoleBasis, normalize_pci
from buildmgr.core.errors import UserError
from buildmgr.core.units import MIB
from buildmgr.devices.captures import parse_list_devices
from buildmgr.devices.captures.record import role_of, with_role

PROBE_TIMEOUT_S = 60
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the API child imports buildmgr from here


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


def run_capture(capture: backends.Capture, environ: Mapping[str, str]) -> list[Any]:
    """A vendor tool's records (run from this environment's PATH, in it), or none where it is missing or fails."""
    tool = proc.which(capture.command[0], environ)
    if tool is None:
        return []
    ran = proc.run([tool, *capture.command[1:]], timeout=30, env=dict(environ))
    return capture.parse(ran.stdout) if ran.ok else []


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


def enumeration_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: environ[k] for k in backends.enumeration_variables() if k in environ}


def probe_tool(prefix: Path) -> Path | None:
    for name in ("llama-bench", "llama-cli", "llama-completion", "llama-server"):
        if (prefix / "bin" / name).is_file():
            return prefix / "bin" / name
    return None


def backend_module_dir(prefix: Path) -> Path | None:
    """Where a GGML_BACKEND_DL build keeps its backend modules (ggml installs them beside the tools)."""
    return prefix / "bin" if any((prefix / "bin").glob("libggml-*.so")) else None


def _api_command(prefix: Path, servers: tuple[str, ...] = ()) -> tuple[list[str] | None, str]:
    """The API child's command line (with `servers`, their devices added as the tools add them), or why it cannot
    run on this prefix."""
    from buildmgr.devices import ggml_api

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
    command = [sys.executable, "-m", "buildmgr.devices.ggml_api", str(lib), *([str(modules)] if modules else [])]
    if servers:
        registry, remote = backends.remote()
        command += ["--remote", registry, remote.add_server, ",".join(servers)]
    return command, ""


def child_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a child that imports buildmgr from where this one does (the API child)."""
    return dict(environ) | {"PYTHONPATH": os.pathsep.join(filter(None, (PACKAGE_ROOT, environ.get("PYTHONPATH"))))}


def api_devices(ran: proc.Ran) -> tuple[list[Device] | None, str]:
    from buildmgr.devices.ggml_api import MARKER, answer

    if not ran.ok:
        return None, ran.failure()
    said = answer(ran.stdout)
    if said is None:
        return None, f"no {MARKER!r} line in its output"
    try:
        records = json.loads(said)
    except ValueError as err:
        return None, f"unreadable answer (not JSON: {err})"
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        return None, "unreadable answer (not a list of device records)"
    try:
        return [device_from_api(r) for r in records if r.get("type") != "cpu"], ""
    except KeyError as err:
        return None, f"unreadable answer (a device record without {err})"
    except (TypeError, ValueError) as err:  # a field of another type: int(None), int("x")
        return None, f"unreadable answer (a device record's field: {err})"


def cross_check(api: list[Device], listed: list[Device]) -> tuple[str, ...]:
    """Every name the API gives must be in --list-devices, and vice versa."""
    api_names, listed_names = [d.name for d in api], [d.name for d in listed]
    only_api = [n for n in api_names if n not in listed_names]
    only_listed = [n for n in listed_names if n not in api_names]
    return tuple(
        [f"{n}: given by ggml's API but not by --list-devices" for n in only_api]
        + [f"{n}: listed by --list-devices but not by ggml's API" for n in only_listed]
    )


def probe_build(
    prefix: Path, environ: Mapping[str, str], timeout: float = PROBE_TIMEOUT_S, servers: tuple[str, ...] = ()
) -> ProbeResult:
    """Ask the build's own libraries (ggml's device API, in a child) and its tool's --list-devices, together; with
    `servers` (HOST:PORT of remote backends' servers), their devices too, as llama.cpp's tools name them.

    The API is the answer; the parse is the cross-check, and the fallback when the API cannot run.
    """
    environ = dict(environ)
    tool = probe_tool(prefix)
    recorded = enumeration_env(environ)
    if tool is None:
        return ProbeResult(False, (), 0.0, "", recorded, error="no llama tool in the prefix")
    api_command, api_error = _api_command(prefix, servers)
    child_env = child_environ(environ)
    start = time.monotonic()
    registry, server = backends.remote()
    remote = [server.client_flag, ",".join(servers)] if servers else []  # before: the tool lists as it reads it
    commands = [[str(tool), *remote, "--list-devices"]] + ([api_command] if api_command else [])
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
        api, api_error = api_devices(api_run[0])
    failed = ProbeResult(False, (), seconds, tool.name, recorded, output=output, api_error=api_error)
    if servers and not any(d.backend == registry for d in api or listed or ()):
        # a client that a server refused aborts, and says why only in what it printed
        refused = server.refused(output + "".join(r.output for r in api_run))
        why = refused or list_error or api_error or "no device of the servers appeared"
        return replace(failed, error=why)
    if api is not None:
        mismatches = cross_check(api, listed) if listed is not None else (f"--list-devices failed: {list_error}",)
        return replace(failed, ok=True, devices=tuple(api), method="ggml-api", mismatches=mismatches)
    if listed is not None:
        return replace(failed, ok=True, devices=tuple(listed), method="list-devices")
    return replace(failed, error=list_error)


def device_from_api(record: dict[str, Any]) -> Device:
    """One record of `ggml_api.read_devices` → a Device, memory in MiB as --list-devices prints it."""
    name, backend = str(record["name"]), str(record["backend"])
    number = re.search(r"(\d+)$", name)
    ggml_type = str(record["type"])
    device = Device(
        name,
        backend,
        int(number.group(1)) if number else None,
        str(record["description"] or ""),
        int(record["memory_total"]) // MIB,
        int(record["memory_free"]) // MIB,
        role_of(backend, ggml_type),
        pci_bus_id=normalize_pci(record.get("device_id")),
        ggml_type=ggml_type,
        device_id=record.get("device_id"),
        caps=dict(record.get("caps") or {}),
        source="ggml-api",
    )
    if device.type != Role.UNKNOWN and backend not in backends.NOT_A_CARD:
        return replace(device, role_basis=RoleBasis.GGML)
    return with_role(device)
