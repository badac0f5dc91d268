"""llama.cpp's RPC server as the pinned source has it (tools/rpc/rpc-server.cpp, ggml/src/ggml-rpc/ggml-rpc.cpp): its
command line, the start-up block it prints, the lines it fails with, and the protocol version a build's own
ggml-rpc.h declares (the record in `__init__` names the program and these). Pure: the process is run elsewhere."""

from __future__ import annotations

import re

from buildmgr.backend_spec import ServerStarted

_STARTING = re.compile(r"^Starting RPC server v(\d+)\.(\d+)\.(\d+)\s*$")
_FIELD = re.compile(r"^  (endpoint|local cache|transport)\s*: (.*?)\s*$")
_MISMATCH = re.compile(r"RPC server version mismatch: (\d+\.\d+\.\d+)")
_NO_CONNECTION = re.compile(r"Failed to connect to (\S+)")
_UNRESOLVED = re.compile(r"Cannot resolve host '([^']*)'")
_PROTO = re.compile(r"#define\s+RPC_PROTO_(MAJOR|MINOR|PATCH)_VERSION\s+(\d+)")
_UNKNOWN_DEVICE = re.compile(r"^error: unknown device: (.*?)\s*$")
_AVAILABLE = re.compile(r"^  (\S+): (.*) \((\d+) MiB, (\d+) MiB free\)\s*$")
# the lines after which it exits without serving, each with what it means (rpc-server exits 0 after some of them)
_FAILURES = {
    "Invalid host address": "it takes an IPv4 address to listen on",
    "Failed to create server socket": "could not listen there: the port is in use, or the address is not this host's",
    "No devices found": "no device to expose: this build sees none here",
    "Failed to find RPC backend": "this build has no RPC backend",
    "Failed to initialize RPC transport": "its network transport did not start",
    "Failed to create cache directory": "could not make its tensor cache directory",
}


def command(server: str, bind: str, port: int, devices: tuple[str, ...], cache: bool, threads: int | None) -> list[str]:
    """The server's argument list."""
    found = [server, "--host", bind, "--port", str(port)]
    if devices:
        found += ["--device", ",".join(devices)]
    if threads is not None:
        found += ["--threads", str(threads)]
    return found + (["--cache"] if cache else [])


def protocol(header: str) -> str | None:
    """The protocol version a ggml-rpc.h declares (major.minor.patch), None where it declares none."""
    parts = dict(_PROTO.findall(header))
    if set(parts) != {"MAJOR", "MINOR", "PATCH"}:
        return None
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


def started(lines: list[str]) -> ServerStarted | None:
    """The start-up block once its last line (the transport) came; None before."""
    begin = next((i for i, line in enumerate(lines) if _STARTING.match(line)), None)
    if begin is None:
        return None
    version = _STARTING.match(lines[begin])
    assert version is not None
    fields: dict[str, str] = {}
    for line in lines[begin + 1 :]:
        if (field := _FIELD.match(line)) is not None:
            fields[field.group(1)] = field.group(2)
    if "transport" not in fields:
        return None
    block = lines[begin : next(i for i, line in enumerate(lines) if line.startswith("  transport")) + 1]
    cache = fields.get("local cache")
    return ServerStarted(
        ".".join(version.groups()),
        fields.get("endpoint", ""),
        None if cache in (None, "n/a") else cache,
        fields["transport"],
        "\n".join(block) + "\n",
    )


def failure(lines: list[str]) -> str | None:
    """Why the server will not serve, from a line it fails with; None where it printed none of them."""
    for line in lines:
        if (unknown := _UNKNOWN_DEVICE.match(line)) is not None:
            names = [m.group(1) for other in lines if (m := _AVAILABLE.match(other)) is not None]
            has = ", ".join(names) if names else "none"
            return f"it has no device {unknown.group(1)!r} here (it has: {has})"
        for start, meaning in _FAILURES.items():
            if line.startswith(start):
                return meaning
    return None


def refused(output: str) -> str | None:
    """Why a client's servers refused it, from what ggml-rpc printed as it aborted (ggml-rpc.cpp's client)."""
    if (mismatch := _MISMATCH.search(output)) is not None:
        return f"the server speaks RPC protocol {mismatch.group(1)}"
    if (unresolved := _UNRESOLVED.search(output)) is not None:
        return f"its client cannot resolve {unresolved.group(1)} (it looks up IPv4 addresses only)"
    if (lost := _NO_CONNECTION.search(output)) is not None:
        return f"it could not connect to {lost.group(1)}"
    return None
