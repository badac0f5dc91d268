"""Ollama's device lines (Go's slog `key=value`) and its CUDA probe's lines read into a `Reading` (pure)."""

from __future__ import annotations

import json
import re

from buildmgr import backends
from buildmgr.core.units import MIB, UNITS
from buildmgr.devices.captures.record import Draft, Rank, Reading
from buildmgr.devices.captures.shapes import KEY_VALUE, OLLAMA, OLLAMA_LINES, OLLAMA_PROBE_LINE


def _mib(value: str | None) -> int | None:
    """A key=value line's memory (`15.9 GiB`) in MiB; None where absent, or where it is an unsigned subtraction that
    wrapped (Ollama's `17179869183.8 GiB`: no device has 2^63 bytes)."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?) ?([KMGT]i?B|B)", value or "")
    if found is None or found[2] not in UNITS:
        return None
    size = float(found[1]) * UNITS[found[2]]
    return round(size / MIB) if size < 2**63 else None


def _unquoted(value: str) -> str:
    """A slog value as printed: Go's strconv.Quote where it holds a space or a quote."""
    if not value.startswith('"'):
        return value
    try:
        return str(json.loads(value))
    except ValueError:
        return value[1:-1]


def read_ollama(lines: list[str], reading: Reading) -> None:
    """Ollama's key=value device lines and its CUDA probe's lines. A device whose line names it as ggml does
    (`name=CUDA0`) is that device; one that only Ollama's id tells apart is named by its backend alone, as a device
    without an index is (`CUDA`). Its lines are joined by that id within a run (Ollama's DeviceID: id and library)."""
    known: dict[tuple[int, str, str], Draft] = {}

    def device(n: int, library: str, ident: str, name: str = "") -> Draft:
        backend = backends.library_backend(library) or library  # a library no backend has stays as printed
        key = (reading.runs[n], backend, ident)
        if key not in known:
            if name:
                known[key] = reading.record(n, name, backend)
            else:
                known[key] = reading.record(n, backend, backend, ident=f"ollama id {ident}")
        reading.saw(OLLAMA)
        return known[key]

    for n, line in enumerate(lines):
        if probe := OLLAMA_PROBE_LINE.search(line):
            mib = int(probe["value"]) if probe["mib"] else int(probe["value"]) // MIB
            record = device(n, probe["library"], probe["id"])
            if probe["which"] == "totalMem":
                record.add(Rank.OLLAMA, total=mib)
            else:
                record.add(Rank.OLLAMA, free=mib)
            continue
        if "msg=" not in line:
            continue
        pairs = {m["key"]: _unquoted(m["value"]) for m in KEY_VALUE.finditer(line)}
        said, total_key, free_key = next(
            ((said, t, f) for message, t, f in OLLAMA_LINES if (said := re.fullmatch(message, pairs.get("msg", "")))),
            (None, None, ""),
        )
        library = pairs.get("library") or (said.groupdict().get("library") if said else None)
        ident = pairs.get("id") or pairs.get("gpu")
        if said is None or not library or not ident:
            continue
        name = pairs.get("name", "")
        backend = backends.library_backend(library) or library
        prefixes = sorted({*backends.device_prefixes(), backend}, key=len, reverse=True)
        ggml = name if re.fullmatch(rf"(?:{'|'.join(map(re.escape, prefixes))})\d*", name) else ""
        # `description` beside ggml's name; without it, `name` is the vendor library's name of the card
        description = pairs.get("description", "" if ggml else name)
        total, free = _mib(pairs.get(total_key or "")), _mib(pairs.get(free_key))
        if free is not None and total is not None and free > total:
            free = None  # more free than there is: a subtraction that wrapped
        device(n, library, ident, ggml).add(Rank.OLLAMA, description, total, free, rough=True)
