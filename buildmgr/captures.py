"""Text that llama.cpp's tools print, read into device records: `--list-devices` (and rpc-server's device list),
and the records of ggml's device API. Pure; the backend modules read their own vendor tools' captures."""

from __future__ import annotations

import re

from buildmgr import backends
from buildmgr.devices import Device, normalize_pci
from buildmgr.errors import UserError

HEADERS = ("Available devices:", "Devices:")  # llama tools' --list-devices; rpc-server's start-up
_MEMORY = r"\s+\((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$"
_NAME = r"(?P<backend>[A-Za-z][A-Za-z_]*?)(?P<index>\d*):\s+(?P<description>\S.*?)"
# A device line right after its header's prefix; the memory group is optional (older or trimmed captures)
# and is the last parenthesised group, since descriptions hold their own parentheses.
_DEVICE = re.compile(r"^\s{1,4}" + _NAME + r"(?:" + _MEMORY + r"|\s*$)")
# Anywhere in a line behind some other log prefix, only with the memory group.
_PREFIXED_DEVICE = re.compile(r"\s{2}" + _NAME + _MEMORY)
MIB = 1 << 20


def role_of(backend: str, ggml_type: str | None) -> str:
    """The device's role from ggml's own type, except for a device that is not a card (BLAS, RPC)."""
    if backend in backends.NOT_A_CARD:
        return backends.NOT_A_CARD[backend]
    return ggml_type if ggml_type in ("gpu", "igpu", "accel", "cpu") else "unknown"


def roles_from_log(text: str) -> dict[str, str]:
    """Device name → the role a backend's own log line tells (e.g. an integrated GPU)."""
    return {
        f"{backend}{match['index']}": role
        for backend, pattern, role in backends.log_roles()
        for match in re.finditer(pattern, text)
    }


def _device(backend: str, index: str, description: str, total: str | None, free: str | None, roles: dict) -> Device:
    number = int(index) if index else None
    return Device(
        f"{backend}{index}",
        backend,
        number,
        description.strip(),
        int(total) if total is not None else None,
        int(free) if free is not None else None,
        roles.get(f"{backend}{index}", role_of(backend, None)),
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
    roles = roles_from_log(text)
    devices: list[Device] = []
    for line in lines[start + 1 :]:
        bare = line[len(prefix) :] if prefix.strip() and line.startswith(prefix) else line
        match = _DEVICE.match(bare) or _PREFIXED_DEVICE.search(line)
        if match and match["backend"] != "Device":  # a backend's init log: "  Device 0: …" lines
            devices.append(
                _device(match["backend"], match["index"], match["description"], match["total"], match["free"], roles)
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
