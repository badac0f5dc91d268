"""Servers that a network attacker would run, for the repository tests: on loopback (one that redirects, one that
dribbles, one that never answers, https with a certificate of the test's own) and a test host of its own address in
a network namespace the test makes (`ip netns`, as root), which logs every request it gets. Traffic goes nowhere
else."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


# a static server on ADDR PORT serving ROOT, each request's line appended to LOG: what runs on the test host
_LOGGING_SERVER = """
import functools, http.server, sys
addr, port, root, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
class Logged(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        with open(log, "a") as out:
            out.write(self.requestline + "\\n")
http.server.ThreadingHTTPServer((addr, port), functools.partial(Logged, directory=root)).serve_forever()
"""


class TestHost:
    """A host of its own at `address`, in network namespace `name`, reached over a veth pair from this one."""

    __test__ = False

    def __init__(self, name: str, address: str, log: Path) -> None:
        self.name, self.address, self.log = name, address, log
        self.process: subprocess.Popen[bytes] | None = None

    def serve(self, root: Path, port: int = 8080) -> str:
        """A static server of `root` on the test host; its URL."""
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", self.name, sys.executable, "-c", _LOGGING_SERVER, self.address, str(port),
             str(root), str(self.log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.address, port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("the test host's server did not start")
        self.log.write_text("")  # the probe above is not a request
        return f"http://{self.address}:{port}/"

    def requests(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def test_host(tmp_path: Path) -> Iterator[TestHost]:
    """A test host in a network namespace of the test's own, at 10.203.N.2 (this host is 10.203.N.1); skipped with
    the reason where namespaces cannot be made (not root, no iproute2)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a test host in a network namespace needs root and iproute2 ('ip netns')")
    tag = f"bm{os.getpid() % 100000}"
    subnet = ipaddress.ip_network(f"10.203.{os.getpid() % 250}.0/30")
    here, there = (str(a) for a in subnet.hosts())
    made = _ip("netns", "add", tag)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    host = TestHost(tag, there, tmp_path / f"{tag}.log")
    try:
        for step in (
            ["link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b"],
            ["link", "set", f"{tag}b", "netns", tag],
            ["addr", "add", f"{here}/30", "dev", f"{tag}a"],
            ["link", "set", f"{tag}a", "up"],
            ["-n", tag, "addr", "add", f"{there}/30", "dev", f"{tag}b"],
            ["-n", tag, "link", "set", f"{tag}b", "up"],
            ["-n", tag, "link", "set", "lo", "up"],
        ):
            done = _ip(*step)
            assert done.returncode == 0, (step, done.stderr)
        yield host
    finally:
        host.stop()
        _ip("link", "del", f"{tag}a")
        _ip("netns", "del", tag)


# --- loopback servers --------------------------------------------------------------------------------------------


def start(handler: type[http.server.BaseHTTPRequestHandler], context: ssl.SSLContext | None = None) -> tuple[
    http.server.ThreadingHTTPServer, str]:  # fmt: skip
    """`handler` served on 127.0.0.1 (with `context`, over TLS); the server and its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    scheme = "https" if context is not None else "http"
    return server, f"{scheme}://127.0.0.1:{server.server_address[1]}/"


def redirecting(to: str, code: int = 302) -> type[http.server.BaseHTTPRequestHandler]:
    """Every GET answered `code` to the same path under `to`."""

    class Redirect(QuietFiles):
        def do_GET(self) -> None:
            self.send_response(code)
            self.send_header("Location", to.rstrip("/") + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Redirect


def dribbling(
    root: Path, slow: Callable[[str], bool], size: int, every: float
) -> type[http.server.BaseHTTPRequestHandler]:
    """Files of `root`; each whose name `slow` picks is sent `size` bytes at a time, `every` seconds apart (its
    Content-Length true): a server that keeps a host waiting without ever going silent."""

    class Dribble(QuietFiles):
        def do_GET(self) -> None:
            path = Path(self.translate_path(self.path))
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not slow(path.name):
                self.wfile.write(data)
                return
            try:
                for at in range(0, len(data), size):
                    self.wfile.write(data[at : at + size])
                    self.wfile.flush()
                    time.sleep(every)
            except OSError:
                pass  # the host gave up

    def handler(*args: object) -> Dribble:
        return Dribble(*args, directory=str(root))  # type: ignore[arg-type]

    return handler  # type: ignore[return-value]


@contextmanager
def silent() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never says a word; yields the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def tls(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context with a self-signed certificate for 127.0.0.1 and localhost, and the file a client trusts it
    by (SSL_CERT_FILE)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "buildmgr test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return context, cert_file
