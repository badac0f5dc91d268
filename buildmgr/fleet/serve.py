"""`buildmgr rpc serve`: llama.cpp's own ggml-rpc-server started from an installed build, on loopback unless asked
otherwise (its protocol has no authentication), reported once it listens (where, what it exposes, the build and the
protocol), and stopped cleanly. Its output goes through a pseudo-terminal: it prints its start-up block with printf,
which a pipe or file would hold back until it exits."""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import pty
import signal
import socket
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr import backends
from buildmgr.core import proc
from buildmgr.core.errors import BuildFailed, UserError
from buildmgr.devices.captures import parse_list_devices
from buildmgr.fleet.endpoints import require_remote
from buildmgr.trust.repo_location import on_this_machine

if TYPE_CHECKING:
    from buildmgr.core.device_records import Device
    from buildmgr.store import Build

STARTUP_S = 120.0  # a server initialises every device it exposes before it listens (a GPU's context: seconds)
TAIL_LINES = 12
UNSAFE = (
    "{program} has no authentication or encryption: anyone who reaches {where} can run code on its devices "
    "and read what it holds. Reach it through an SSH tunnel (ssh -N -L {port}:127.0.0.1:{port} HOST on the client, "
    "the server left on loopback) or on a private network only."
)


@dataclass(frozen=True)
class ServeRequest:
    """What to serve, resolved and checked before anything starts."""

    build: Build
    server: Path
    bind: str
    port: int
    devices: tuple[str, ...]
    cache: bool
    threads: int | None

    @property
    def on_network(self) -> bool:
        return not on_this_machine(self.bind)

    def command(self) -> list[str]:
        return backends.remote()[1].command(
            str(self.server), self.bind, self.port, self.devices, self.cache, self.threads
        )


@dataclass(frozen=True)
class Serving:
    """A server that listens: the report `rpc serve` prints (`--json`)."""

    build_id: str
    endpoint: str  # host:port, as a client names it in --rpc
    protocol: str
    devices: tuple[Device, ...]
    cache: str | None
    transport: str
    pid: int
    log: Path
    on_network: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "build": self.build_id,
            "endpoint": self.endpoint,
            "protocol": self.protocol,
            "devices": [
                {
                    "name": d.name,
                    "description": d.description,
                    "backend": d.backend,
                    "memory_total_mib": d.memory_total_mib,
                    "memory_free_mib": d.memory_free_mib,
                }
                for d in self.devices
            ],
            "cache": self.cache,
            "transport": self.transport,
            "pid": self.pid,
            "log": str(self.log),
            "network": self.on_network,
        }


def resolve(
    build: Build,
    bind: str,
    port: int,
    devices: tuple[str, ...],
    *,
    cache: bool,
    threads: int | None,
    allow_network: bool,
) -> ServeRequest:
    """The request checked: a build with the server, a port, a loopback address unless the network is allowed."""
    remote = backends.remote()[1]
    require_remote(build, f"it has no {remote.program} to serve")
    server = build.installed_tool(remote.program)
    if not 0 < port < 65536:
        raise UserError(
            f"--port {port} is no TCP port: give one from 1 to 65535 (llama.cpp's default is {remote.default_port})"
        )
    if threads is not None and threads < 1:
        raise UserError(f"--threads {threads} must be at least 1")
    try:  # the server's transport takes an IPv4 address only (inet_addr in ggml-rpc's transport)
        address = ipaddress.IPv4Address(bind)
    except ValueError:
        raise UserError(
            f"--bind {bind!r} is not an IPv4 address: {remote.program} listens on one IPv4 address (127.0.0.1, or "
            "this host's address on a private network)"
        ) from None
    if address.is_unspecified:
        raise UserError(
            f"--bind {bind} would listen on every network of this host, where no client can name it: give the address "
            "of the private network clients reach it on"
        )
    if not on_this_machine(bind) and not allow_network:
        raise UserError(
            f"--bind {bind} is not loopback and {remote.program} has no authentication: add --allow-network on a "
            f"private network, or leave it on 127.0.0.1 and reach it through an SSH tunnel (ssh -N -L "
            f"{port}:127.0.0.1:{port} HOST)"
        )
    return ServeRequest(build, server, bind, port, devices, cache, threads)


def _port_free(bind: str, port: int) -> None:
    """UserError where something already listens there (asked before the server starts, which would say only that
    it could not listen)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server sets it: TIME_WAIT is no use
        try:
            probe.bind((bind, port))
        except OSError as err:
            what = "is in use" if err.errno == errno.EADDRINUSE else f"cannot be bound ({err.strerror or err})"
            raise UserError(f"port {port} on {bind} {what}: stop what listens there, or pass --port") from None


def _listening(bind: str, port: int) -> bool:
    """Whether a connection to the server is taken (it accepts, reads no hello, and closes: harmless)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
        client.settimeout(1.0)
        try:
            client.connect((bind, port))
        except OSError:
            return False
    return True


class _Lines:
    """The server's output read from the pseudo-terminal on a thread: every line kept, and written to the log."""

    def __init__(self, fd: int, log: Path) -> None:
        self.lines: list[str] = []
        self.ended = threading.Event()
        self._fd, self._log = fd, log
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        pending = b""
        with open(self._log, "ab") as handle:
            while True:
                try:
                    chunk = os.read(self._fd, 65536)
                except OSError:  # EIO: the server's side closed
                    chunk = b""
                if not chunk:
                    break
                try:
                    handle.write(chunk)
                    handle.flush()
                except OSError:  # a full disk: the pty is still drained, or the server would block on its output
                    pass
                pending += chunk
                *whole, pending = pending.split(b"\n")
                self.lines += [line.decode("utf-8", "replace").rstrip("\r") for line in whole]
        if pending:
            self.lines.append(pending.decode("utf-8", "replace").rstrip("\r"))
        self.ended.set()

    def tail(self) -> tuple[str, ...]:
        return tuple(self.lines[-TAIL_LINES:])


def _own_terminal() -> None:
    """In the server, before it runs: the pty its output goes to becomes its controlling terminal, so that it gets
    SIGHUP and ends when buildmgr's side closes, however buildmgr ends (SIGKILL included)."""
    fcntl.ioctl(1, termios.TIOCSCTTY, 0)


@contextmanager
def _running(request: ServeRequest, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], _Lines]]:
    """The server in its own session (a Ctrl-C reaches buildmgr, which stops it), its output through a pty."""
    with open(log, "w", encoding="utf-8") as handle:
        handle.write("$ " + " ".join(request.command()) + "\n")
    main, side = pty.openpty()
    try:
        process = subprocess.Popen(
            request.command(),
            stdin=subprocess.DEVNULL,
            stdout=side,
            stderr=side,
            start_new_session=True,
            preexec_fn=_own_terminal,  # no thread runs yet: the reader starts after
        )
    except OSError as err:
        os.close(main)
        os.close(side)
        raise UserError(f"cannot start {request.server}: {err.strerror or err}") from None
    os.close(side)
    lines = _Lines(main, log)
    try:
        yield process, lines
    finally:
        proc.stop(process)
        lines.ended.wait(timeout=5)
        os.close(main)


def _ready(
    request: ServeRequest, process: subprocess.Popen[bytes], lines: _Lines, log: Path, stop: threading.Event
) -> tuple[Serving, int] | None:
    """Wait for the start-up block and a connection taken: the report, and the index of the first line after the
    block (its own connection's lines follow); None where `stop` was set first; BuildFailed with the cause where it
    exits first (read once it has exited: a GPU build prints the devices it has slowly, after the error)."""
    remote = backends.remote()[1]
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline and not stop.is_set():
        if process.poll() is not None:
            lines.ended.wait(timeout=2)
            why = remote.failure(lines.lines) or f"it exited with code {process.returncode} before it listened"
            raise BuildFailed(f"{remote.program} of {request.build.id} did not start: {why}", log, lines.tail())
        block = remote.started(lines.lines)
        mark = len(lines.lines)
        if block is not None and _listening(request.bind, request.port):
            devices = tuple(parse_list_devices(block.devices_text))
            serving = Serving(
                request.build.id,
                f"{request.bind}:{request.port}",
                block.protocol,
                devices,
                block.cache,
                block.transport,
                process.pid,
                log,
                request.on_network,
            )
            return serving, mark
        stop.wait(0.05)
    if stop.is_set():
        return None
    raise BuildFailed(f"{remote.program} did not listen within {STARTUP_S:.0f} s", log, lines.tail())


def serve(request: ServeRequest, log: Path, ready: Callable[[Serving], None], say: Callable[[str], None]) -> int:
    """Start, report (`ready`), then relay the clients that come and go until SIGINT, SIGTERM or SIGHUP stops it (0),
    or it exits by itself (1, with its last lines)."""
    remote = backends.remote()[1]
    _port_free(request.bind, request.port)
    stop = threading.Event()
    before = {number: signal.signal(number, lambda *_: stop.set()) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with _running(request, log) as (process, lines):
            found = _ready(request, process, lines, log, stop)
            if found is None:
                say(f"stopped {remote.program} of {request.build.id} before it listened")
                return 0
            serving, seen = found
            ready(serving)
            own = 2  # the connection _ready made: accepted, then closed
            while True:
                stopping = stop.wait(0.2)
                fresh = lines.lines[seen:]
                seen += len(fresh)
                for line in fresh:  # what came before a stop is said too
                    if line.startswith(remote.client_lines):
                        if own:
                            own -= 1
                            continue
                        say("a client connected" if line.startswith(remote.client_lines[0]) else "the client left")
                if stopping:
                    break
                if process.poll() is not None:
                    lines.ended.wait(timeout=2)
                    raise BuildFailed(
                        f"{remote.program} exited with code {process.returncode} while serving", log, lines.tail()
                    )
    except KeyboardInterrupt:
        pass
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    say(f"stopped {remote.program} of {request.build.id}")
    return 0
