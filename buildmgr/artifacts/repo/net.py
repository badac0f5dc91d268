"""What crosses the network to a repository: the rule every URL passes, the first and each redirect alike (https, or
plain http from and to this machine only); how long a server may take (`Limits`: no answer, a small file not whole,
an archive slower than `MIN_RATE`); and a network fault said in the same words whichever library met it (urllib,
requests through oras)."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from buildmgr.core.config import where_set
from buildmgr.core.errors import Deadline, NetworkFault, RepositoryFault, UserError
from buildmgr.trust.repo_location import on_this_machine

if TYPE_CHECKING:
    import urllib.request

    import requests

TIMEOUT_S = 30.0
MIN_RATE = 10 * 1024  # bytes a second an archive must keep up, over each `timeout_s`: slower is a server that dribbles
SETTING = where_set("network_timeout")
PLAIN_HTTP = "plain http:// only for a repository on this machine (127.0.0.0/8, ::1, localhost)"
_MAX_HOPS = 5


@dataclass(frozen=True)
class Limits:
    """How long a server may take: `timeout_s` without an answer (a connection, any read), `whole_s` for a small
    file (an index, a signature, a manifest) or an archive's headers to come whole; and an archive must keep up
    `MIN_RATE` over each `timeout_s`."""

    timeout_s: float = TIMEOUT_S

    @property
    def whole_s(self) -> float:
        """How long a small file (or an archive's headers) may take in all, from the request on: twice the
        timeout, so that a server that is silent is said as such ("no answer") before it is cut off."""
        return 2 * self.timeout_s

    @classmethod
    def parse(cls, text: str) -> Limits:
        try:
            seconds = float(text)
        except ValueError:
            seconds = 0.0
        if not 0 < seconds <= 3600:
            raise UserError(f"{SETTING}: {text!r} is not a number of seconds from 0 to 3600, e.g. 30")
        return cls(seconds)


NO_LIMITS_GIVEN = Limits()  # the defaults, where no setting was read


def plain_http_refused(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme.lower() == "http" and not on_this_machine(parts.hostname or "")


def hop_refused(origin: str, target: str) -> str | None:
    """Why a redirect from `origin` to `target` is not followed (None: it is): the hop must pass the rule the first
    URL passed, and never go from https to plain http (whoever is on the way could read and change it)."""
    scheme = urllib.parse.urlsplit(target).scheme.lower()
    if scheme == "https":
        return None
    if scheme != "http":
        return "neither https:// nor plain http:// on this machine"
    if urllib.parse.urlsplit(origin).scheme.lower() == "https":
        return "from https:// to plain http://, which anyone on the way can read and change"
    return PLAIN_HTTP if plain_http_refused(target) else None


def _redirected(origin: str, target: str, why: str) -> NetworkFault:
    return NetworkFault(f"{origin} redirected to {target}: {why}; not followed")


def opener(url: str) -> urllib.request.OpenerDirector:
    """urllib's, with every redirect checked by `hop_refused` before it is followed (at most 5); for plain http (on
    this machine), no proxy the environment names: it would carry the request off the machine in the clear."""
    import urllib.request

    class Checked(urllib.request.HTTPRedirectHandler):
        max_redirections = _MAX_HOPS

        def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
            if (why := hop_refused(req.full_url, newurl)) is not None:
                fp.close()
                raise _redirected(req.full_url, newurl, why)
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    direct = [urllib.request.ProxyHandler({})] if urllib.parse.urlsplit(url).scheme.lower() == "http" else []
    return urllib.request.build_opener(Checked, *direct)


def guard(session: requests.Session, limits: Limits) -> None:
    """A requests session (oras') held to the same rules as urllib here: no request to another machine's plain http
    (a token realm's included), a timeout on every connection and read, and every redirect checked by `hop_refused`
    before it is followed."""
    import requests.adapters

    class Timed(requests.adapters.HTTPAdapter):
        def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            if plain_http_refused(request.url):  # any request oras makes: a token realm's too, not only a redirect
                raise NetworkFault(f"{request.url}: {PLAIN_HTTP}; not contacted")
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = limits.timeout_s
            return super().send(request, *args, **kwargs)

    def check(response: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
        if response.is_redirect:
            target = urllib.parse.urljoin(response.url, response.headers["location"])
            if (why := hop_refused(response.url, target)) is not None:
                response.close()
                raise _redirected(response.url, target, why)
        return response

    for scheme in ("http://", "https://"):
        session.mount(scheme, Timed())
    session.max_redirects = _MAX_HOPS
    session.hooks["response"].append(check)


def read_small(read: Callable[[int], bytes], where: str, cap: int) -> bytes:
    """What `read(n)` (a read1: what has arrived, up to n) gives until the end, refused past `cap` bytes: no more than
    a byte past it is read. Over the network, `within` bounds the time it takes."""
    chunks: list[bytes] = []
    got = 0
    while block := read(min(1 << 16, cap + 1 - got)):
        chunks.append(block)
        got += len(block)
        if got > cap:
            raise RepositoryFault(
                f"{where} is larger than {cap >> 20} MiB, which no index, signature or manifest is: refused unread "
                "(is this a buildmgr repository?)"
            )
    return b"".join(chunks)


class within:
    """The block (a request, with its connection, TLS, headers and, for a small file, its body; or one read of an
    archive's body) cut off `limits.whole_s` from now, however a server keeps its socket busy (headers or a body a
    byte at a time, each read well inside the sockets' own timeout): a timer signal (ITIMER_REAL) interrupts the
    read in the main thread, where every command reads its repositories. Not armed in another thread, nor inside
    another `within` (the outer one bounds it): there the sockets' per-read timeout is the only bound. A timer this
    process was given (a parent's, kept across exec) is set aside meanwhile and set again after, less the time
    passed. A host name's lookup is the resolver's to bound (no signal interrupts it)."""

    _open: ClassVar[list[within]] = []  # the blocks armed now: one at a time

    def __init__(self, limits: Limits, what: str) -> None:
        self.limits, self.what = limits, what
        self.armed = False
        self.previous: Any = None
        self.prior: tuple[float, float] = (0.0, 0.0)
        self.started = 0.0

    def _expire(self, signum: int, frame: object) -> None:
        if self.armed:  # a signal that comes as the block ends, once disarmed, is let go
            raise Deadline

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread() or within._open:
            return
        self.previous = signal.signal(signal.SIGALRM, self._expire)
        self.started = time.monotonic()
        self.prior = signal.setitimer(signal.ITIMER_REAL, self.limits.whole_s)
        self.armed = True
        within._open.append(self)

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: object) -> None:
        if not self.armed:
            return
        self.armed = False  # first: from here on the timer raises nothing
        within._open.remove(self)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(
            signal.SIGALRM, self.previous if self.previous is not None else signal.SIG_DFL
        )  # None: set from C
        delay, interval = self.prior
        if delay:  # the timer set aside, set again (at once, where it came due meanwhile)
            signal.setitimer(signal.ITIMER_REAL, max(delay - (time.monotonic() - self.started), 1e-3), interval)
        if kind is Deadline:
            raise NetworkFault(
                f"{self.what} did not come whole in {self.limits.whole_s:g} s: a server that dribbles, or a link that "
                f"slow ({SETTING} gives it longer)"
            ) from None


class TooSlow(Exception):
    """An archive that came slower than MIN_RATE over a whole window (`Repo.fetch` says which)."""

    def __init__(self, rate: float, window_s: float) -> None:
        super().__init__(rate, window_s)
        self.rate, self.window_s = rate, window_s


class Pace:
    """An archive's download measured over windows of `timeout_s`: one slower than MIN_RATE raises TooSlow, as
    curl's --speed-limit with --speed-time does (a server that never goes silent, yet sends a byte at a time)."""

    def __init__(self, limits: Limits) -> None:
        self.window_s = limits.timeout_s
        self.started, self.got = time.monotonic(), 0

    def arrived(self, count: int) -> None:
        self.got += count
        elapsed = time.monotonic() - self.started
        if elapsed < self.window_s:
            return
        if self.got / elapsed < MIN_RATE:
            raise TooSlow(self.got / elapsed, elapsed)
        self.started, self.got = time.monotonic(), 0


def unreachable(err: BaseException, timeout_s: float = TIMEOUT_S) -> str | None:
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
        if isinstance(found, TimeoutError) or type(found).__name__ in ("ReadTimeout", "ConnectTimeout"):
            return f"no answer in {timeout_s:g} s"
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
    if "urllib3" in sys.modules:  # what requests' streamed body raises as it is read (a read timed out, cut short)
        found.append(sys.modules["urllib3"].exceptions.HTTPError)
    return tuple(found)


_LIBRARIES = ("oras", "requests", "urllib3", "jsonschema", "http", "json", "socket", "ssl")


def registry_said(err: BaseException) -> bool:
    """Whether an error under an OCI call is the registry's answer, not a defect here: what oras and the libraries
    under it raise for an answer (oras' own ValueError and RuntimeError, its AuthenticationException, jsonschema's
    ValidationError, the transport's errors), or any error raised inside those libraries' own code (a KeyError in
    oras' reading of a header a registry sent). A TypeError in buildmgr's own code is a defect, said as one."""
    import jsonschema
    from oras.auth import AuthenticationException

    if isinstance(err, (ValueError, RuntimeError, AuthenticationException, jsonschema.ValidationError)):
        return True
    if isinstance(err, transport_errors()):
        return True
    innermost = err.__traceback__
    while innermost is not None and innermost.tb_next is not None:
        innermost = innermost.tb_next
    module = str(innermost.tb_frame.f_globals.get("__name__", "")) if innermost is not None else ""
    return module.split(".")[0] in _LIBRARIES
