"""Where a repository is, as text: which kind (a directory, http(s), an OCI registry) and the one spelling it is known
by (`identity`), which pins and the index versions a host saw are keyed by, so `HTTP://LOCALHOST:80//x/` and
`http://localhost/x/` are one repository. Pure: no file or network is touched."""

from __future__ import annotations

import enum
import ipaddress
import os
import posixpath
import re
import urllib.parse

from buildmgr.core.errors import UserError

_DEFAULT_PORTS = {"http": 80, "https": 443}
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class Kind(enum.Enum):
    DIRECTORY = "directory"
    HTTP = "http"  # http:// or https://, read-only
    OCI = "oci"


def on_this_machine(host: str) -> bool:
    """Loopback: 127.0.0.0/8, ::1 or localhost (brackets of an IPv6 literal allowed)."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def kind_of(text: str) -> Kind:
    scheme = urllib.parse.urlsplit(text).scheme.lower()
    if scheme in ("http", "https"):
        return Kind.HTTP
    if scheme == "oci":
        return Kind.OCI
    if scheme and scheme != "file" and len(scheme) > 1:  # one letter: a Windows drive, a directory
        raise UserError(f"{text}: a repository is a directory, an http(s):// URL or oci://HOST/NAMESPACE/NAME")
    return Kind.DIRECTORY


def _host_port(parts: urllib.parse.SplitResult, text: str) -> str:
    """HOST[:PORT] in one spelling: the host in lower case without a trailing dot, the scheme's default port left
    out."""
    try:
        port = parts.port
    except ValueError:
        raise UserError(f"{text}: its port is not a number from 0 to 65535") from None
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UserError(f"{text}: no host in it")
    try:
        host = str(ipaddress.ip_address(host))  # an address in its one form: [0:0::1] is [::1]
    except ValueError:
        try:
            host = host.encode("idna").decode(
                "ascii"
            )  # a name in its one form: bücher.example is xn--bcher-kva.example
        except UnicodeError:
            raise UserError(f"{text}: {host!r} is not a host name") from None
    shown = f"[{host}]" if ":" in host else host
    return shown if port is None or port == _DEFAULT_PORTS.get(parts.scheme.lower()) else f"{shown}:{port}"


def _path(path: str) -> str:
    """A URL's path in one spelling, ending in /: repeated slashes and `.`/`..` segments resolved, escapes of
    unreserved characters decoded and the others in upper case (RFC 3986, 6.2.2)."""

    def escape(match: re.Match[str]) -> str:
        char = chr(int(match[1], 16))
        return char if char in _UNRESERVED else f"%{match[1].upper()}"

    resolved = posixpath.normpath("/" + _ESCAPE.sub(escape, path)).strip("/")
    return f"/{resolved}/" if resolved else "/"


def url_identity(text: str) -> str:
    """An http(s):// or oci:// repository in one spelling (scheme and host in lower case, no default port, its
    path resolved and ending in / for http(s)); refused where it has what no repository URL has."""
    parts = urllib.parse.urlsplit(text)
    if parts.query or parts.fragment or parts.username is not None:
        raise UserError(f"{text}: a repository URL has no user, query or fragment (?…, #…, user@)")
    scheme = parts.scheme.lower()
    where = _host_port(parts, text)
    if scheme == "oci":
        return f"oci://{where}/{parts.path.strip('/')}"
    return f"{scheme}://{where}{_path(parts.path)}"


def directory_identity(text: str) -> str:
    """A directory (a path, relative or not, or file://) by its absolute path, normalized, links not followed (no
    file system access, which a pin made before it was created has not)."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme.lower() != "file":
        return os.path.abspath(text)
    if parts.netloc not in ("", "localhost"):
        raise UserError(f"{text}: a file:// URL names no other host than this one: file:///PATH")
    return os.path.abspath(urllib.parse.unquote(parts.path))


def identity(text: str) -> str:
    """The one spelling of any repository: what pins and the versions a host saw are keyed by."""
    if kind_of(text) is Kind.DIRECTORY:
        return directory_identity(text)
    return url_identity(text)


def canonical(name: str) -> str:
    """A key written by an earlier buildmgr (a pin, a version seen) in today's spelling: a user in it left out (an
    earlier buildmgr took `oci://user@host/…`, reached as `oci://host/…` today, whose pin must hold there); one that
    is still no repository's is kept as it is (it matches nothing)."""
    parts = urllib.parse.urlsplit(name)
    if parts.username is not None:
        parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
    try:
        return identity(urllib.parse.urlunsplit(parts) if parts.scheme else name)
    except UserError:
        return name
