"""Text that llama.cpp's tools print, read into device records: `--list-devices` (and rpc-server's device list), any
log people paste (each backend's start-up lines, the load log, test-backend-ops), and the records of ggml's device API.
Pure; the backend modules hold their own lines' shapes and their families' names, and read their vendor tools."""

from __future__ import annotations

import re

from buildmgr import backends
from buildmgr.core.device_records import Device
from buildmgr.core.errors import UserError
from buildmgr.devices.captures.llama import header_prefix, read_backend_lines, read_blocks, read_load_log
from buildmgr.devices.captures.ollama import read_ollama
from buildmgr.devices.captures.record import Parsed, Reading, to_device
from buildmgr.devices.captures.runs import find_runs, split_lines
from buildmgr.devices.captures.shapes import HEADERS, LLAMA_LINE


def read_text(text: str) -> Parsed:
    """Any text a user pastes → its devices, each once, with the name llama.cpp gives it for -dev.

    Reads the device list of --list-devices, rpc-server and llama-server, each backend's start-up lines, the load log,
    and test-backend-ops, behind any log prefix, joined or wrapped. A llama.cpp log without devices is an empty list
    with a note; a text that is no llama.cpp or ggml log is a UserError.
    """
    lines = split_lines(text)
    reading = Reading(*find_runs(lines))
    read_blocks(lines, reading)
    read_backend_lines(lines, reading)
    read_load_log(lines, reading)
    read_ollama(lines, reading)
    said = [
        match.group(0).strip()
        for line in lines
        for pattern in backends.log_empty()
        if (match := re.search(pattern, line))
    ]
    devices = tuple(to_device(record) for record in reading.records.values())
    if not devices and not said and not any(LLAMA_LINE.search(line) for line in lines):
        raise UserError(
            "no llama.cpp or ggml log lines in that text: paste the output of `llama-cli --list-devices`, or a "
            "llama.cpp log from its start (the lines that name the devices)"
        )
    said = list(dict.fromkeys(said))
    if devices:
        notes = [f"the log says: {line}" for line in said]
    elif said:
        notes = [f"no devices: the log says '{line}'" for line in said]
    else:
        seen = ", ".join(
            list(dict.fromkeys(m.group(0).rstrip(":") for ln in lines for m in LLAMA_LINE.finditer(ln)))[:4]
        )
        notes = [f"no devices: the text holds llama.cpp log lines ({seen}) but none names a device"]
    return Parsed(devices, tuple(reading.shapes), tuple(notes))


def parse_list_devices(text: str) -> list[Device]:
    """`llama-* --list-devices` (or rpc-server) output → devices; UserError if it has no device block.

    Noise is allowed anywhere: init logs before or after the block, prompt lines, log prefixes. The block decides
    which devices there are; the init lines only add what they tell (an iGPU's uma: 1).
    """
    lines = text.splitlines()
    if not any(header_prefix(line) is not None for line in lines):
        raise UserError(f"no '{HEADERS[0]}' block found: is this the output of a llama.cpp tool's --list-devices?")
    reading = Reading(*find_runs(lines))
    read_blocks(lines, reading)
    read_backend_lines(lines, reading)
    return [to_device(record) for record in reading.records.values() if record.listed]
