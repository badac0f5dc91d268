"""What crosses the network to a repository: the rule a URL must pass (https, or plain http on this machine only),
and a network fault said in the same words whichever library met it (urllib, requests through oras)."""

from __future__ import annotations

import ipaddress
import socket
import sys

TIMEOUT_S = 30.0


def on_this_machine(host: str) -> bool:
    """Loopback: 127.0.0.0/8, ::1 or localhost (brackets of an IPv6 literal allowed)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unreachable(err: BaseException) -> str | None:
    """Why a server could not be reached, in the same words whichever library said it (urllib, requests through
    oras): the connection refused, timed out, or the host unknown; None for any other fault."""
    seen: set[int] = set()
    stack: list[object] = [err]
    while stack:
        found = stack.pop()
        if not isinstance(found, BaseException) or id(found) in seen:
            continue
        seen.add(id(found))
        if isinstance(found, ConnectionRefusedError):
            return "connection refused (is a server running there?)"
        if isinstance(found, TimeoutError):
            return f"no answer in {TIMEOUT_S:g} s"
        if isinstance(found, socket.gaierror):
            return "unknown host"
        stack += [found.__cause__, found.__context__, getattr(found, "reason", None), *found.args]
    return None


def transport_errors() -> tuple[type[Exception], ...]:
    """What reading a repository can raise: OSError, and http.client's and requests' own errors where an http(s) or
    OCI repository imported them (a directory repository imports neither)."""
    found: list[type[Exception]] = [OSError]
    if "http.client" in sys.modules:
        found.append(sys.modules["http.client"].HTTPException)
    if "requests" in sys.modules:
        found.append(sys.modules["requests"].RequestException)
    return tuple(found)
