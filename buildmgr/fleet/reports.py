"""A fleet file: what `rpc serve --json` printed on each host (one JSON object a line, any number of files), read
back, so that a client knows what stands behind each endpoint before anything connects: the server's build, the
protocol it speaks, and its devices as that host names them. The RPC protocol itself carries none of it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from buildmgr.core.errors import UserError


@dataclass(frozen=True)
class RemoteDevice:
    """One device a server exposes, as its own host names it."""

    name: str
    description: str
    backend: str
    memory_total_mib: int | None


@dataclass(frozen=True)
class ServerReport:
    endpoint: str
    build: str
    protocol: str
    devices: tuple[RemoteDevice, ...]


def _text(value: object, where: str, field: str) -> str:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise UserError(
            f"{where}: {field!r} must be non-empty printable text, as 'buildmgr rpc serve --json' writes it"
        )
    return value


def _report(data: object, where: str) -> ServerReport:
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise UserError(f"{where}: not what 'buildmgr rpc serve --json' prints (an object with its devices)")
    devices = []
    for device in data["devices"]:
        if not isinstance(device, dict):
            raise UserError(f"{where}: a device that is not an object")
        memory = device.get("memory_total_mib")
        devices.append(
            RemoteDevice(
                _text(device.get("name"), where, "name"),
                _text(device.get("description"), where, "description"),
                _text(device.get("backend"), where, "backend"),
                memory if isinstance(memory, int) and not isinstance(memory, bool) else None,
            )
        )
    return ServerReport(
        _text(data.get("endpoint"), where, "endpoint"),
        _text(data.get("build"), where, "build"),
        _text(data.get("protocol"), where, "protocol"),
        tuple(devices),
    )


def read(paths: Sequence[Path]) -> tuple[ServerReport, ...]:
    """Every report of the files, in order (a file's lines in order); UserError naming the file and line that is not
    one, and an endpoint given twice."""
    found: list[ServerReport] = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"cannot read the fleet file {path}: {getattr(err, 'strerror', None) or err}") from None
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                data = json.loads(line)
            except (ValueError, RecursionError):
                raise UserError(
                    f"{where}: not JSON; a fleet file holds what 'buildmgr rpc serve --json' printed"
                ) from None
            report = _report(data, where)
            if any(r.endpoint == report.endpoint for r in found):
                raise UserError(f"{where}: {report.endpoint} is in the fleet twice")
            found.append(report)
    if not found:
        raise UserError("the fleet files hold no server: put in each what 'buildmgr rpc serve --json' printed")
    return tuple(found)


def behind(reports: Sequence[ServerReport], prefix: str) -> dict[str, tuple[ServerReport, RemoteDevice]]:
    """The client's name of each remote device (PREFIX0, PREFIX1 … across the servers in order, each server's devices
    in its order, as llama.cpp numbers them) → its server and the device as that host names it."""
    pairs = [(r, d) for r in reports for d in r.devices]
    return {f"{prefix}{index}": pair for index, pair in enumerate(pairs)}
