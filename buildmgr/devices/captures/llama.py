"""llama.cpp's and ggml's own device lines read into a `Reading`: device lists, each backend's start-up lines, the
load log, test-backend-ops (pure)."""

from __future__ import annotations

import re

from buildmgr import backends
from buildmgr.core.units import MIB
from buildmgr.devices.captures.record import Draft, Rank, Reading
from buildmgr.devices.captures.shapes import (
    BLOCK,
    BREAKDOWN,
    BREAKDOWN_LINE,
    DEVICE_INFO_LINE,
    DEVICE_LINE,
    FIT_LINE,
    HEADERS,
    MEMORY,
    META_LINE,
    OPS_BACKEND_LINE,
    OPS_DESCRIPTION_LINE,
    OPS_MEMORY_LINE,
    PREFIXED_DEVICE_LINE,
    REGISTERED_LINE,
    ROWS,
    SKIPPED_LINE,
    USING_LINE,
)


def read_blocks(lines: list[str], reading: Reading) -> None:
    found = next(((n, prefix) for n, line in enumerate(lines) if (prefix := header_prefix(line)) is not None), None)
    if found is None:
        read_rows(lines, reading)
    else:
        start, prefix = found
        for n, line in enumerate(lines[start + 1 :], start + 1):
            bare = line[len(prefix) :] if prefix.strip() and line.startswith(prefix) else line
            match = DEVICE_LINE.match(bare) or PREFIXED_DEVICE_LINE.search(line)
            if match and match["backend"] != "Device":  # a backend's init log: "  Device 0: …" lines
                name = match["backend"] + match["index"]
                reading.saw(BLOCK)
                reading.record(n, name, match["backend"], match["description"]).add(
                    Rank.BLOCK, match["description"], match["total"], match["free"]
                )
    for n, line in enumerate(lines):
        match = DEVICE_INFO_LINE.search(line)
        if match:
            reading.saw(BLOCK)
            reading.record(n, match["name"], None, match["description"]).add(
                Rank.BLOCK, match["description"], match["total"], match["free"]
            )


def read_rows(lines: list[str], reading: Reading) -> None:
    """Device rows quoted without their header (in docs, chat, code comments): a row's own shape, with its memory
    and a known backend's name, is evidence enough."""
    names = "|".join(sorted(backends.device_prefixes(), key=len, reverse=True))
    row = re.compile(rf"(?<![\w-])(?P<backend>{names})(?P<index>\d*):\s+(?P<description>\S.*?)" + MEMORY)
    for n, line in enumerate(lines):
        match = row.search(line)
        if match:
            reading.saw(ROWS)
            reading.record(n, match["backend"] + match["index"], match["backend"], match["description"]).add(
                Rank.BLOCK, match["description"], match["total"], match["free"]
            )


def total_of(groups: dict[str, str | None]) -> int | None:
    """The total MiB a line printed: in MiB, in 10^6 bytes (Metal's MB), in whole 10^6 bytes cut down (SYCL's table:
    rounded, the nearer MiB) or in decimal MiB."""
    mb, cut, mib, total = groups.get("total_mb"), groups.get("total_m"), groups.get("total_mib"), groups.get("total")
    if total is not None:
        return int(total)
    if cut is not None:
        return round(int(cut) * 1e6 / MIB)
    return int(float(mb) * 1e6) // MIB if mb else int(float(mib)) if mib else None


def read_backend_lines(lines: list[str], reading: Reading) -> None:
    for row in backends.log_devices():
        named = None  # the backend name its `after` header gave
        last: Draft | None = None  # the device its `more` lines tell of
        for n, line in enumerate(lines):
            header = re.search(row.after, line) if row.after else None
            if header:
                named = header["backend"] if re.fullmatch(r"[A-Za-z]+", header["backend"]) else None
            for match in re.finditer(row.pattern, line):
                groups = match.groupdict()
                backend = groups.get("backend") or named or row.backend
                description, driver = _named_driver(row, groups, reading.builds.get(reading.runs[n]))
                last = reading.record(n, f"{backend}{groups.get('index') or ''}", backend, description)
                last.add(Rank.INIT, description, total_of(groups), groups.get("free"), groups.get("pci"))
                last.detail = groups.get("detail") or last.detail
                last.driver = driver or last.driver
                _told(row, groups, last)
                reading.saw(row.shape)
            for pattern in row.more if last is not None else ():
                if more := re.search(pattern, line):
                    told = more.groupdict()
                    last.add(Rank.INIT, total=total_of(told))  # type: ignore[union-attr]  # `last` is set: see the loop
                    _told(row, told, last)  # type: ignore[arg-type]


def _named_driver(row: backends.LogDevice, groups: dict[str, str | None], build: int | None) -> tuple[str, str | None]:
    """(description, driver) of a start-up line: its last parenthesis is the name's where the run's build printed no
    driver there (a build number outside the form's range is no commit count and tells nothing)."""
    description, driver = groups["description"] or "", groups.get("driver")
    if driver is not None and row.driver_since and build is not None:
        first, since = row.driver_since
        if first <= build < since:
            return f"{description} ({driver})", None
    return description, driver


def _told(row: backends.LogDevice, groups: dict[str, str | None], record: Draft) -> None:
    """The role a device's line tells, where its role group has the value that tells it."""
    if row.role and groups.get(row.role[0]) == row.role[1]:
        record.role = (row.role[2], row.role[3])
    if row.separate and groups.get(row.separate[0]) == row.separate[1]:
        record.separate = row.separate[2]


def read_load_log(lines: list[str], reading: Reading) -> None:
    current: Draft | None = None
    # llama.cpp prints one `using device` line per device of a model: two alike lines of one list are two devices
    # (RPC servers whose endpoints a poster redacted alike)
    listed: dict[tuple[str, str], int] = {}
    for n, line in enumerate(lines):
        if match := USING_LINE.search(line):
            reading.saw("load log (using device)")
            pci = match["pci"] if match["pci"] != "unknown id" else None
            alike = (match["name"], match["description"])
            listed[alike] = again = listed.get(alike, -1) + 1
            reading.record(n, match["name"], None, match["description"], again).add(
                Rank.LOAD, match["description"], free=match["free"], pci=pci
            )
        else:
            listed = {}
        if match := SKIPPED_LINE.search(line):
            reading.saw("load log (using device)")
            for name, description in (
                (match["name"], match["description"]),
                (match["other"], match["other_description"]),
            ):
                reading.record(n, name, None, description).add(Rank.LOAD, description, pci=match["pci"])
        if match := REGISTERED_LINE.search(line):
            reading.saw("register_device lines")
            reading.record(n, match["name"], None, match["description"]).add(Rank.LOAD, match["description"])
        if match := META_LINE.search(line):
            reading.saw("load log (Meta device)")
            reading.record(n, match["name"], None, match["description"]).add(Rank.LOAD, match["description"])
        if match := BREAKDOWN_LINE.search(line):
            reading.saw(BREAKDOWN)
            reading.record(n, match["name"], None, match["description"]).add(
                Rank.TABLE, match["description"], match["total"], match["free"]
            )
        elif match := FIT_LINE.search(line):
            reading.saw(BREAKDOWN)
            reading.record(n, match["name"], None, match["description"]).add(Rank.LOAD, match["description"])
        if match := OPS_BACKEND_LINE.search(line):
            reading.saw("test-backend-ops")
            current = reading.record(n, match["name"])
        elif current is not None and (match := OPS_DESCRIPTION_LINE.search(line)):
            current.add(Rank.OPS, match["description"])
        elif current is not None and (match := OPS_MEMORY_LINE.search(line)):
            current.add(Rank.OPS, total=match["total"], free=match["free"])


def header_prefix(line: str) -> str | None:
    """The log prefix in front of a device block's header ('' for a bare header), or None if not a header."""
    text = line.rstrip()
    if text.strip() in HEADERS:
        return ""
    main = HEADERS[0]
    if text.endswith(main) and text[: -len(main)][-1:] in (" ", "=", ":", '"'):
        return text[: -len(main)]
    return None
