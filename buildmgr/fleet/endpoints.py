"""The servers a command names (`HOST:PORT,…`, as llama.cpp's --rpc takes them), read, and each asked whether it
takes a connection within the network timeout before a llama.cpp client is pointed at it: llama.cpp's own client
aborts on a server it cannot reach and waits as long as the system lets a connect wait on one that does not answer."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.core.errors import Unreachable, UserError

if TYPE_CHECKING:
    from buildmgr.store import Build


def parse(text: str, option: str = "--rpc") -> tuple[str, ...]:
    """`HOST:PORT[,HOST:PORT…]` → the endpoints, in order, each once; UserError else. Read as llama.cpp's RPC client
    reads them: split at commas and at the first colon, nothing stripped, the host an IPv4 address or a name it
    looks up over IPv4 (ggml-rpc.cpp's parse_endpoint and its transport)."""
    found: list[str] = []
    for item in text.split(","):
        host, _, port = item.partition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or item != item.strip() or "[" in host:
            raise UserError(
                f"{option} {item!r} is not HOST:PORT as llama.cpp's RPC client reads it: each server an IPv4 address "
                "or a host name, a colon and a port (e.g. 192.168.1.20:50052), comma-separated without spaces"
            )
        if item in found:
            raise UserError(f"{option} names {item} twice: llama.cpp would give its devices two names each")
        found.append(item)
    return tuple(found)


def why_unreachable(endpoint: str, timeout: float) -> str | None:
    """None where the server takes a connection within `timeout` (it then reads no hello and lets it go); else why."""
    host, _, port = endpoint.partition(":")
    try:
        address = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0][4]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
            client.settimeout(timeout)
            client.connect(address)
            return None
    except ConnectionRefusedError:
        return "nothing listens there (connection refused): start it with 'buildmgr rpc serve' on that host"
    except TimeoutError:
        return f"no answer within {timeout:g} s: the host is down, or a firewall drops the connection"
    except socket.gaierror as err:
        return f"its host name has no IPv4 address ({err.strerror}): llama.cpp's RPC client looks up IPv4 only"
    except OSError as err:
        return err.strerror or str(err)


def check(endpoints: tuple[str, ...], timeout: float) -> None:
    """Unreachable naming every server that takes no connection, with why."""
    down = [f"{e}: {why}" for e in endpoints if (why := why_unreachable(e, timeout)) is not None]
    if down:
        raise Unreachable("cannot reach " + "; ".join(down))


def ready_for(build: Build, servers: tuple[str, ...], timeout: float, option: str = "--rpc") -> None:
    """Before a build's tool is pointed at servers: the build has the remote backend (else llama.cpp stops at
    --rpc), each server is HOST:PORT as its client reads them, and each takes a connection within `timeout` (its
    client aborts on one it cannot reach)."""
    require_remote(build, f"llama.cpp stops at {option} ('RPC not supported in this build')")
    check(parse(",".join(servers), option), timeout)


def require_remote(build: Build, why: str) -> None:
    """UserError where the build lacks the remote backend, saying `why` that matters and which recipe has it."""
    registry, _ = backends.remote()
    if registry not in build.receipt.recipe.backends:
        part = backends.backend(registry).names.recipe
        raise UserError(
            f"build {build.id} has no {registry} backend: {why}; use a build with +{part} (e.g. cpu+{part})"
        )


def build_protocol(build: Build) -> str | None:
    """The protocol the build's remote backend speaks, as its installed header declares it; None without one."""
    header = build.prefix / backends.remote()[1].header
    return backends.remote()[1].protocol(header.read_text(errors="replace")) if header.is_file() else None
