"""Binary repositories, three kinds behind one interface (`Repo`): a directory (a shared file system, or anything a
static web server serves) written under a lock; the same layout read over http(s); and an OCI registry through the
`oras` SDK, where each archive is its own manifest tagged `sha256-<digest>` (so two publishers at once never write the
same thing), and the index is a manifest of its own, tagged `index`, rebuilt from those tags at each publish. Every
write of an index is one version more, and signed (`--sign`) it carries an expiry and its .minisig, over the very
bytes a host reads; the last index each key signed is kept too (`indexes/ID.json`, tag `index-ID`). Nothing a reader
sees is ever half written: a blob is copied to a temporary name, checked and renamed, the index replaced atomically,
last; a registry makes a manifest visible only once its blobs are in."""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import os
import random
import re
import socket
import stat
import tempfile
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from buildmgr import jsonshape, signing
from buildmgr.artifacts import index
from buildmgr.artifacts.archive import Artifact
from buildmgr.errors import BuildmgrError, RepositoryFault, UserError
from buildmgr.fsutil import atomic_write_bytes, atomic_write_text, fsync_file, locked, sha256_file
from buildmgr.jsonshape import NewerSchema, ShapeError

if TYPE_CHECKING:
    from oras.provider import Registry

LOCK = ".lock"
_BLOCK = 1 << 20
TIMEOUT_S = 30.0
# An index, a signature, a manifest or an entry is read whole into memory before any check: past this, none is what a
# repository should serve (an index of a thousand archives is well under 1 MiB), and reading on is what a hostile
# server wants. Archives are read by their signed size instead.
METADATA_MAX = 16 << 20
OCI_TAG = "sha256-"  # an archive's manifest is tagged sha256-<its digest>
# a later signer's signature files, a manifest of their own: signature-<KEY ID>-<the archive's digest> (a prefix that
# is not sha256-, which readers before it take for an archive's)
OCI_SIGNATURE_TAG = "signature-"
_SIGNATURE_TAG = re.compile(r"signature-([0-9A-F]{16})-([0-9a-f]{64})")
ENTRY_MEDIA_TYPE = "application/vnd.buildmgr.entry.v1+json"  # the manifest's config: the archive's index entry
OCI_INDEX_TAG = "index"  # the index's manifest (the last one a key signed: index-<KEY ID>)
INDEX_MEDIA_TYPE = "application/vnd.buildmgr.index.v1+json"  # its layer index.json (.minisig: MEDIA_TYPES)
INDEX_CONFIG_MEDIA_TYPE = "application/vnd.buildmgr.index.config.v1+json"  # its config: version and signer, for people
_INDEX_TRIES = 20  # rebuilds of an OCI index that another publisher changed meanwhile, before giving up
SIGNATURE_MEDIA_TYPE = "application/vnd.buildmgr.signature.v1+json"  # a later signer's manifest's config
MEDIA_TYPES = {
    "": "application/vnd.buildmgr.archive.v1.tar+gzip",
    index.MINISIG: "application/vnd.buildmgr.minisig.v1",
    index.ATTESTATION: "application/vnd.dsse.envelope.v1+json",
}

Progress = Callable[[int, int], None]  # (bytes so far, bytes in all)
RepoError = RepositoryFault


@dataclass(frozen=True)
class Published:
    entry: index.Entry
    already: bool  # the repository held this archive (by digest) before
    signature_added: str | None = None  # the key whose signature this publish wrote (None: no signature written)
    written: index.Index | None = None  # the index this publish wrote (None: it changed nothing)


@dataclass(frozen=True)
class IndexFiles:
    """An index's bytes as the repository serves them, and its .minisig (None: unsigned)."""

    data: bytes
    minisig: bytes | None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _expiry(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).isoformat(timespec="seconds")


def on_this_machine(host: str) -> bool:
    """Loopback: 127.0.0.0/8, ::1 or localhost (brackets of an IPv6 literal allowed)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _read_checked(artifact: Artifact) -> bytes:
    """The archive's bytes, read once and checked against its digest: what is copied, pushed and signed is these
    bytes, never the file read again (a file swapped in between would get a signature naming the good digest)."""
    data = artifact.path.read_bytes()
    if hashlib.sha256(data).hexdigest() != artifact.sha256:
        raise RepoError(f"{artifact.path.name} changed while it was being published; try again")
    return data


def _statement_files(artifact: Artifact, data: bytes, key: signing.SecretKey, builder: str) -> dict[str, bytes]:
    """The .minisig of the archive's checked bytes (`_read_checked`) and its DSSE attestation."""
    name, digest = artifact.path.name, artifact.sha256
    comment = index.artifact_comment(name, digest, artifact.receipt.id)
    statement = index.statement(name, digest, artifact.receipt, artifact.receipt_sha256, builder)
    return {
        index.MINISIG: key.sign(data, comment).encode(),
        index.ATTESTATION: (json.dumps(signing.envelope(statement, key), indent=2) + "\n").encode(),
    }


def _entry(artifact: Artifact, size: int, key: signing.SecretKey | None, known: index.Entry | None) -> index.Entry:
    return index.Entry(
        artifact.path.name,
        artifact.sha256,
        size,
        _now(),
        index.summary_of(artifact.receipt, artifact.receipt_sha256),
        key.public.id if key is not None else (known.signed_by if known is not None else None),
    )


def _is_known(known: index.Entry | None, artifact: Artifact, key: signing.SecretKey | None) -> bool:
    """Publishing it again changes nothing: the same archive, and no new signature asked for."""
    return known is not None and known.name == artifact.path.name and (key is None or key.public.id in known.signers)


def _cosigns(text: str, known: index.Entry | None, artifact: Artifact, key: signing.SecretKey | None) -> bool:
    """Another key signs an archive a first key signed: its signature goes beside the first's, which stays as it is
    (a host that trusts only the first key still installs it). A signed archive is published under its published
    name only: its signatures name that file, and an entry of another name would drop them."""
    if known is None or not known.signers:
        return False
    if known.name != artifact.path.name:
        raise UserError(
            f"{artifact.path.name} is {known.name} of {text} (sha256 {known.sha256[:12]}…), signed by "
            f"{', '.join(known.signers)}: publish it under that name"
        )
    return key is not None and key.public.id not in known.signers


class _Larger(Exception):
    """The source had more bytes than the index's size (`Repo.fetch` says which archive)."""


def _append(response: IO[bytes], part: Path, mode: str, have: int, size: int, progress: Progress | None) -> None:
    """Append what `response` sends up to `size` bytes in all, and no further: an endless source (a link to
    /dev/zero, a body that never ends) fills neither the cache nor the time. One byte past it raises `_Larger`."""
    if progress:
        progress(have, size)  # where it starts: a resumed download says what it kept
    # read1: what has arrived, up to a block (read would wait for a whole block: no progress on a slow link, and
    # nothing kept of a download cut short inside one)
    read = getattr(response, "read1", response.read)
    with open(part, mode) as out:
        while have < size and (block := read(min(_BLOCK, size - have))):
            out.write(block)
            out.flush()  # what arrived is kept if the process is killed: the next try resumes after it
            have += len(block)
            if progress:
                progress(have, size)
    if have >= size and read(1):
        raise _Larger


class Repo(ABC):
    """Where a repository is, and how its index, archives and signature files are read (and, where it can be,
    written)."""

    text: str

    @abstractmethod
    def listing(self) -> index.Index: ...

    @property
    @abstractmethod
    def identity(self) -> str:
        """The repository as a pin names it (`key trust FILE --for REPO`): a directory by its absolute path
        (normalized, links not followed), whether given as a path, relative or not, or as file://; a URL with its
        trailing /; oci://HOST[:PORT]/NAME."""

    @abstractmethod
    def index_files(self, key_id: str | None = None) -> IndexFiles | None:
        """The index and its .minisig as served (None: there is none): the newest, or the last one `key_id` signed."""

    @abstractmethod
    def signatures(self, entry: index.Entry, key_id: str | None = None) -> dict[str, bytes]:
        """The `.minisig` and attestation of the entry by `key_id` (None: its first signer's) that are there, by
        suffix."""

    @abstractmethod
    def _download(self, entry: index.Entry, part: Path, have: int, progress: Progress | None) -> None:
        """Append the archive's bytes from `have` on to `part` (or rewrite it from the start)."""

    def publish(
        self, artifact: Artifact, key: signing.SecretKey | None, builder: str, days: int = index.EXPIRES_DAYS
    ) -> Published:
        raise UserError(f"{self.text}: an http(s) repository is read-only; publish to its directory")

    def sign_index(self, key: signing.SecretKey, days: int = index.EXPIRES_DAYS) -> index.Index:
        """The index written again, one version more, signed by `key` with a new expiry (`publish` without an
        archive): a repository nothing is published to stays valid."""
        raise UserError(f"{self.text}: an http(s) repository is read-only; sign the index in its directory")

    def fetch(self, entry: index.Entry, dest: Path, progress: Progress | None = None) -> None:
        """The archive into `dest`, resuming a `dest.part` an earlier try left; `dest` appears only complete."""
        part = dest.with_name(dest.name + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        have = part.stat().st_size if part.exists() else 0
        if have > entry.size:
            part.unlink()
            have = 0
        try:
            self._download(entry, part, have, progress)
        except _Larger:
            part.unlink(missing_ok=True)  # bytes from a source that lies about its size are not kept
            raise RepoError(
                f"{self.text}: {entry.name} is larger than its index says ({entry.size} bytes); reading stopped there "
                "and what came was deleted"
            ) from None
        except FileNotFoundError:
            raise RepoError(f"{self.text}: {entry.name} is in the index but not in the repository") from None
        except _transport_errors() as err:
            raise RepoError(
                f"reading {entry.name} from {self.text} failed ({getattr(err, 'reason', None) or err}); "
                f"{part.stat().st_size if part.exists() else 0} of {entry.size} bytes are kept and the next try resumes"
            ) from None
        got = part.stat().st_size if part.exists() else 0
        if got < entry.size:
            raise RepoError(
                f"reading {entry.name} from {self.text} stopped after {got} of {entry.size} bytes; they are kept and "
                "the next try resumes"
            )
        # not flushed: after a power loss a torn file fails its digest, which every use checks, and is fetched again
        os.replace(part, dest)


# the OCI distribution spec's repository name: path components of lower-case letters and digits, . _ __ - between
_OCI_NAME = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")


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


def open_repo(text: str) -> Repo:
    """A directory, `file://`, `http(s)://` (read-only) or `oci://HOST[:PORT]/NAMESPACE/NAME`."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme == "http" and not on_this_machine(parts.hostname or ""):
        # anyone on the way could serve an old index, or drop entries, and read what a host asks for
        raise UserError(
            f"{text}: plain http:// only for a repository on this machine (127.0.0.0/8, ::1, localhost): use https://"
        )
    if parts.scheme in ("http", "https"):
        return HttpRepo(text, text if text.endswith("/") else text + "/")
    if parts.scheme == "oci":
        return OciRepo.parse(text)
    if parts.scheme == "file":
        return DirRepo(text, Path(urllib.parse.unquote(parts.path)))
    if parts.scheme and len(parts.scheme) > 1:
        raise UserError(f"{text}: a repository is a directory, an http(s):// URL or oci://HOST/NAMESPACE/NAME")
    return DirRepo(text, Path(text))


def capped(read: Callable[[int], bytes], where: str) -> bytes:
    """What `read(n)` gives, refused past METADATA_MAX: never more than one byte over is read."""
    data = read(METADATA_MAX + 1)
    if len(data) > METADATA_MAX:
        raise RepoError(
            f"{where} is larger than {METADATA_MAX >> 20} MiB, which no index, signature or manifest is: refused "
            "unread (is this a buildmgr repository?)"
        )
    return data


def _open_regular(path: Path) -> BinaryIO:
    """A directory repository's file opened for reading, refused unless it is a regular file: a FIFO would wait for
    a writer for ever, a device (a link to /dev/zero) never ends. O_NONBLOCK so that opening a FIFO does not wait;
    the check is on what was opened, so nothing swapped in after it is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RepoError(
                f"cannot read {path}: it is not a regular file (a FIFO, a device or a link to one, which may never end)"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _parse_index(text: str, data: bytes | None) -> index.Index:
    if data is None:
        raise UserError(f"{text}: no {index.INDEX} here (not a buildmgr repository, or nothing published)")
    try:
        return index.Index.from_text(data)
    except NewerSchema as err:
        raise RepoError(f"{text}/{index.INDEX}: {err}: upgrade buildmgr") from None
    except ShapeError as err:
        raise RepoError(f"{text}/{index.INDEX} is not a buildmgr index ({err})") from None


class _Layout(Repo):
    """index.json and blobs/sha256/<digest>/<name>{,.sha256,.minisig,.intoto.json}: a directory's layout."""

    @abstractmethod
    def read(self, relative: str) -> bytes | None:
        """A small file of the repository (None: not there)."""

    def listing(self) -> index.Index:
        return _parse_index(self.text, self.read(index.INDEX))

    def index_files(self, key_id: str | None = None) -> IndexFiles | None:
        where = index.INDEX if key_id is None else index.key_index(key_id)
        data = self.read(where)
        return IndexFiles(data, self.read(where + index.MINISIG)) if data is not None else None

    def signatures(self, entry: index.Entry, key_id: str | None = None) -> dict[str, bytes]:
        where = entry.signature_path(key_id)
        found = {suffix: self.read(where + suffix) for suffix in (index.MINISIG, index.ATTESTATION)}
        return {suffix: data for suffix, data in found.items() if data is not None}


@dataclass(frozen=True)
class DirRepo(_Layout):
    text: str
    path: Path

    @property
    def identity(self) -> str:
        return os.path.abspath(self.path)  # not resolved: no file system access, which a pin made before it has not

    def read(self, relative: str) -> bytes | None:
        try:
            with _open_regular(self.path / relative) as handle:
                return capped(handle.read, str(self.path / relative))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise RepoError(f"cannot read {self.path / relative}: {getattr(err, 'strerror', None) or err}") from None

    def _download(self, entry: index.Entry, part: Path, have: int, progress: Progress | None) -> None:
        with _open_regular(self.path / entry.path) as src:
            src.seek(have)
            _append(src, part, "ab", have, entry.size, progress)

    def publish(
        self, artifact: Artifact, key: signing.SecretKey | None, builder: str, days: int = index.EXPIRES_DAYS
    ) -> Published:
        """Put a checked artifact, its checksum and (with `key`) its signature files in, then the index, under the
        repository's lock: two publishers at once lose nothing."""
        root = self.path
        if root.exists() and not root.is_dir():
            raise UserError(f"--to {self.text}: not a directory")
        root.mkdir(parents=True, exist_ok=True)
        name, digest = artifact.path.name, artifact.sha256
        with locked(root / LOCK):
            current = self.listing() if (root / index.INDEX).exists() else index.EMPTY
            known = current.find(digest)
            if _is_known(known, artifact, key):
                assert known is not None
                return Published(known, True)
            data = _read_checked(artifact)
            if _cosigns(self.text, known, artifact, key):
                assert known is not None and key is not None
                for suffix, signed in _statement_files(artifact, data, key, builder).items():
                    atomic_write_text(root / f"{known.signature_path(key.public.id)}{suffix}", signed.decode())
                cosigned = dataclasses.replace(known, also_signed_by=(*known.also_signed_by, key.public.id))
                written = _write_index(root, current.with_entry(cosigned), key, days)
                return Published(cosigned, True, key.public.id, written)
            blob = root / index.BLOBS / digest
            blob.mkdir(parents=True, exist_ok=True)
            _place(data, blob / name, digest)
            atomic_write_text(blob / f"{name}.sha256", f"{digest}  {name}\n")
            for suffix, text in (_statement_files(artifact, data, key, builder) if key is not None else {}).items():
                atomic_write_text(blob / f"{name}{suffix}", text.decode())
            entry = _entry(artifact, len(data), key, known)
            written = _write_index(root, current.with_entry(entry), key, days)
        return Published(entry, known is not None, key.public.id if key is not None else None, written)

    def sign_index(self, key: signing.SecretKey, days: int = index.EXPIRES_DAYS) -> index.Index:
        root = self.path
        if not (root / index.INDEX).is_file():
            raise UserError(f"{self.text}: no {index.INDEX} here to sign (publish an archive to it first)")
        with locked(root / LOCK):
            return _write_index(root, self.listing(), key, days)


def _write_index(root: Path, current: index.Index, key: signing.SecretKey | None, days: int) -> index.Index:
    """The next version of the index in place (under the repository's lock), signed with `key` and kept as the last
    one that key signed too. A reader never pairs new bytes with an old signature: the signature goes first, and
    comes back after the bytes (a reader in between finds the key's own copy, whole)."""
    written = current.next(_expiry(days) if key is not None else None)
    data = written.to_text().encode()
    signature = None
    if key is not None:
        signature = key.sign(data, index.signature_comment(written)).encode()
        copy = root / index.key_index(key.public.id)
        copy.with_name(copy.name + index.MINISIG).unlink(missing_ok=True)
        atomic_write_bytes(copy, data)
        atomic_write_bytes(copy.with_name(copy.name + index.MINISIG), signature)
    (root / index.INDEX_SIGNATURE).unlink(missing_ok=True)
    atomic_write_bytes(root / index.INDEX, data)
    if signature is not None:
        atomic_write_bytes(root / index.INDEX_SIGNATURE, signature)
    return written


def _place(data: bytes, dest: Path, sha256: str) -> None:
    """Write the checked bytes under a temporary name, then rename: a blob is whole or absent."""
    if dest.is_file() and sha256_file(dest) == sha256:
        return
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        fsync_file(tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass(frozen=True)
class HttpRepo(_Layout):
    text: str
    url: str

    @property
    def identity(self) -> str:
        return self.url

    def read(self, relative: str) -> bytes | None:
        import http.client  # here: a directory repository needs no HTTP client (10 ms of an install)
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(self.url + relative, timeout=TIMEOUT_S) as response:
                return capped(response.read, self.url + relative)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise RepoError(f"{self.url + relative}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            why = unreachable(err) or str(getattr(err, "reason", err))
            raise RepoError(f"cannot reach {self.url + relative}: {why}") from None

    def _download(self, entry: index.Entry, part: Path, have: int, progress: Progress | None) -> None:
        import urllib.error
        import urllib.request

        headers = {"Range": f"bytes={have}-"} if have else {}
        request = urllib.request.Request(self.url + entry.path, headers=headers)
        try:
            response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise FileNotFoundError(entry.path) from None
            if err.code == 416 and have == entry.size:  # everything is here already
                return
            raise
        with response:  # a server that ignores Range sends it all again (200): start over
            resumed = response.status == 206
            _append(response, part, "ab" if resumed else "wb", have if resumed else 0, entry.size, progress)


# --- OCI registries ------------------------------------------------------------------------------------------------


def _transport_errors() -> tuple[type[Exception], ...]:
    """What reading a repository can raise: OSError, and http.client's and requests' own errors where an http(s) or
    OCI repository imported them (a directory repository imports neither)."""
    import sys

    found: list[type[Exception]] = [OSError]
    if "http.client" in sys.modules:
        found.append(sys.modules["http.client"].HTTPException)
    if "requests" in sys.modules:
        found.append(sys.modules["requests"].RequestException)
    return tuple(found)


def _raw_reader(response: Any) -> Callable[[int], bytes]:
    """requests' streamed body read up to n bytes, as sent (decoded where the server compressed it)."""

    def read(n: int) -> bytes:
        data: bytes = response.raw.read(n, decode_content=True)
        return data

    return read


def _client(insecure: bool) -> Registry:
    """oras' registry client without its own retries (five, sleeping up to 83 s between them): a registry that is
    down is said at once, and `install` resumes the download when it is back."""
    try:
        from oras.provider import Registry
    except ImportError:
        raise UserError("oci:// repositories need the oras package: pip install oras") from None

    class Client(Registry):  # type: ignore[misc]
        do_request = Registry.do_request.__wrapped__

    client: Registry = Client(insecure=insecure)
    return client


@dataclass(frozen=True)
class OciRepo(Repo):
    text: str
    registry: str  # HOST[:PORT]
    name: str  # NAMESPACE/NAME

    @classmethod
    def parse(cls, text: str) -> OciRepo:
        parts = urllib.parse.urlsplit(text)
        name = parts.path.strip("/")
        if not parts.netloc or "/" not in name or parts.query or parts.fragment or ":" in name or "@" in name:
            raise UserError(f"{text}: an OCI repository is oci://HOST[:PORT]/NAMESPACE/NAME (no tag)")
        if not _OCI_NAME.fullmatch(name):
            lower = _OCI_NAME.fullmatch(name.lower())
            fix = (
                f"oci://{parts.netloc}/{name.lower()}" if lower else "lower-case letters, digits and . _ - between them"
            )
            raise UserError(f"{text}: an OCI repository name is lower case, of letters, digits and . _ -; use {fix}")
        return cls(text, parts.netloc, name)

    @property
    def insecure(self) -> bool:
        """Plain http for a registry on this machine only, as docker does; https everywhere else."""
        host = self.registry.split("]")[0] + "]" if self.registry.startswith("[") else self.registry.rsplit(":", 1)[0]
        return on_this_machine(host)

    @property
    def identity(self) -> str:
        return f"oci://{self.registry}/{self.name}"

    def _container(self, tag: str | None = None) -> str:
        return f"{self.registry}/{self.name}" + (f":{tag}" if tag else "")

    def _call(self, what: str, action: Callable[[Registry], Any]) -> Any:
        client = _client(self.insecure)
        try:
            return action(client)
        except BuildmgrError:
            raise
        except Exception as err:  # oras raises requests', jsonschema's and its own errors, and ValueError
            if why := unreachable(err):  # the words the http:// case says for the same fault
                raise RepoError(f"cannot reach {self.registry} ({self.text}): {why}") from None
            shown = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise RepoError(f"{self.text}: {what} failed ({shown})") from None

    def _manifest(self, client: Registry, tag: str) -> dict[str, Any] | None:
        url = f"{client.prefix}://{self.registry}/v2/{self.name}/manifests/{tag}"
        response = client.do_request(
            url, "GET", headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, stream=True
        )
        with response:
            if response.status_code == 404:
                return None
            response.raise_for_status()
            found: dict[str, Any] = json.loads(capped(_raw_reader(response), url))
        return found

    def _blob(self, client: Registry, digest: str) -> bytes:
        url = f"{client.prefix}://{self.registry}/v2/{self.name}/blobs/{digest}"
        response = client.do_request(url, "GET", stream=True)
        with response:
            response.raise_for_status()
            return capped(_raw_reader(response), url)

    def _tags(self, client: Registry) -> list[str]:
        response = client.do_request(f"{client.prefix}://{self.registry}/v2/{self.name}/tags/list", "GET")
        if response.status_code == 404:  # the registry knows no repository of this name
            raise UserError(
                f"{self.text}: {self.registry} has no repository {self.name} (nothing was published to it: check "
                "the name)"
            )
        response.raise_for_status()
        tags = response.json().get("tags") or []
        return [t for t in tags if isinstance(t, str)]

    @staticmethod
    def _cosigned(entry: index.Entry, tags: list[str]) -> index.Entry:
        """The entry with the later signers its signature tags name (the first signer is in its own manifest)."""
        later = {m[1] for t in tags if (m := _SIGNATURE_TAG.fullmatch(t)) and m[2] == entry.sha256}
        return dataclasses.replace(entry, also_signed_by=tuple(sorted(later - {entry.signed_by})))

    def _entry_of(self, client: Registry, manifest: dict[str, Any]) -> index.Entry:
        entry: index.Entry = jsonshape.load(index.Entry, json.loads(self._blob(client, manifest["config"]["digest"])))
        entry.check()
        return entry

    def index_files(self, key_id: str | None = None) -> IndexFiles | None:
        def read(client: Registry) -> IndexFiles | None:
            return self._index_files(client, key_id)

        found: IndexFiles | None = self._call("reading its index", read)
        return found

    def _index_files(self, client: Registry, key_id: str | None) -> IndexFiles | None:
        manifest = self._manifest(client, OCI_INDEX_TAG if key_id is None else f"{OCI_INDEX_TAG}-{key_id}")
        if manifest is None:
            return None
        layers = {
            layer.get("annotations", {}).get("org.opencontainers.image.title", ""): layer
            for layer in manifest.get("layers", [])
        }
        if index.INDEX not in layers:
            raise RepoError(f"{self.text}: the manifest tagged {OCI_INDEX_TAG} holds no {index.INDEX}")
        signature = layers.get(index.INDEX_SIGNATURE)
        return IndexFiles(
            self._blob(client, layers[index.INDEX]["digest"]),
            self._blob(client, signature["digest"]) if signature is not None else None,
        )

    def listing(self) -> index.Index:
        """The index's manifest; where there is none (a repository published to before indexes were), the list of
        the archives' tags, each read from its manifest's config."""
        files = self.index_files()
        if files is not None:
            return _parse_index(self.text, files.data)

        def read(client: Registry) -> index.Index:
            entries = []
            tags = self._tags(client)
            for tag in (t for t in tags if t.startswith(OCI_TAG)):
                entry = self._tagged(client, tag)
                if entry is not None:
                    entries.append(self._cosigned(entry, tags))
            return index.Index(index.SCHEMA, tuple(sorted(entries, key=lambda e: (e.name, e.sha256))))

        try:
            found: index.Index = self._call("reading its tags", read)
        except ShapeError as err:
            raise RepoError(f"{self.text}: an archive's entry is not a buildmgr one ({err})") from None
        return found

    def _layers(self, client: Registry, entry: index.Entry, tag: str | None = None) -> dict[str, dict[str, Any]]:
        """The manifest's layers by their title's suffix after the archive's name ("" the archive itself); `tag`:
        another manifest than the archive's (a later signer's)."""
        manifest = self._manifest(client, tag or f"{OCI_TAG}{entry.sha256}")
        if manifest is None:
            raise FileNotFoundError(entry.name)
        found = {}
        for layer in manifest.get("layers", []):
            title = layer.get("annotations", {}).get("org.opencontainers.image.title", "")
            if title.startswith(entry.name):
                found[title[len(entry.name) :]] = layer
        return found

    def signatures(self, entry: index.Entry, key_id: str | None = None) -> dict[str, bytes]:
        def read(client: Registry) -> dict[str, bytes]:
            later = key_id is not None and key_id != entry.signed_by
            try:
                layers = self._layers(client, entry, f"{OCI_SIGNATURE_TAG}{key_id}-{entry.sha256}" if later else None)
            except FileNotFoundError:
                if not later:
                    raise
                return {}  # install says: the index says it is signed by that key, and its signature is missing
            wanted = (index.MINISIG, index.ATTESTATION)
            return {s: self._blob(client, layers[s]["digest"]) for s in wanted if s in layers}

        found: dict[str, bytes] = self._call(f"reading {entry.name}'s signatures", read)
        return found

    def _download(self, entry: index.Entry, part: Path, have: int, progress: Progress | None) -> None:
        client = _client(self.insecure)
        layer = self._layers(client, entry).get("")
        if layer is None or layer.get("digest") != f"sha256:{entry.sha256}":
            raise FileNotFoundError(entry.name)
        headers = {"Range": f"bytes={have}-"} if have else {}
        url = f"{client.prefix}://{self.registry}/v2/{self.name}/blobs/sha256:{entry.sha256}"
        with client.do_request(url, "GET", headers=headers, stream=True) as response:
            if response.status_code == 404:
                raise FileNotFoundError(entry.name)
            response.raise_for_status()
            resumed = response.status_code == 206
            response.raw.decode_content = False
            _append(response.raw, part, "ab" if resumed else "wb", have if resumed else 0, entry.size, progress)

    def publish(
        self, artifact: Artifact, key: signing.SecretKey | None, builder: str, days: int = index.EXPIRES_DAYS
    ) -> Published:
        """One manifest per archive, tagged by its digest: its blobs first, the manifest last (what makes it seen);
        then the index."""

        def push(client: Registry) -> Published:
            tag = f"{OCI_TAG}{artifact.sha256}"
            manifest = self._manifest(client, tag)
            known = self._entry_of(client, manifest) if manifest is not None else None
            if known is not None:
                known = self._cosigned(known, self._tags(client))
            if _is_known(known, artifact, key):
                assert known is not None
                return Published(known, True)
            data = _read_checked(artifact)
            if _cosigns(self.text, known, artifact, key):
                assert known is not None and key is not None
                self._push_signature(client, artifact, data, key, builder)
                cosigned = dataclasses.replace(
                    known, also_signed_by=tuple(sorted({*known.also_signed_by, key.public.id}))
                )
                return Published(cosigned, True, key.public.id, self._push_index(client, key, days, cosigned))
            entry = _entry(artifact, len(data), key, known)
            with tempfile.TemporaryDirectory(prefix="buildmgr-oci-") as scratch:
                # the checked bytes are pushed from a copy of our own: the file at artifact.path may change meanwhile
                archive = Path(scratch) / artifact.path.name
                archive.write_bytes(data)
                files = [f"{archive}:{MEDIA_TYPES['']}"]
                for suffix, signed in (
                    _statement_files(artifact, data, key, builder) if key is not None else {}
                ).items():
                    path = Path(scratch) / f"{artifact.path.name}{suffix}"
                    path.write_bytes(signed)
                    files.append(f"{path}:{MEDIA_TYPES[suffix]}")
                config = Path(scratch) / "entry.json"
                config.write_text(json.dumps(jsonshape.dump(entry), sort_keys=True))
                annotations = {
                    "org.opencontainers.image.title": artifact.path.name,
                    "org.opencontainers.image.created": entry.published,
                }
                client.push(
                    target=self._container(tag),
                    files=files,
                    manifest_config=f"{config}:{ENTRY_MEDIA_TYPE}",
                    manifest_annotations=annotations,
                    disable_path_validation=True,
                    quiet=True,
                )
            written = self._push_index(client, key, days, entry)
            return Published(entry, known is not None, key.public.id if key is not None else None, written)

        found: Published = self._call(f"pushing {artifact.path.name}", push)
        return found

    def sign_index(self, key: signing.SecretKey, days: int = index.EXPIRES_DAYS) -> index.Index:
        def push(client: Registry) -> index.Index:
            return self._push_index(client, key, days, None)

        found: index.Index = self._call("signing its index", push)
        return found

    def _push_index(
        self, client: Registry, key: signing.SecretKey | None, days: int, own: index.Entry | None
    ) -> index.Index:
        """The index rebuilt from the archives' tags (an entry the last index holds is taken from it, ours from
        `own`, another from its manifest's config) and pushed, one version more. No lock: two publishers at once
        may each push an index without the other's archive, so each reads the tags again after its push and
        rebuilds until its index holds every archive and signer tagged by then; the last to push sees all."""
        for attempt in range(_INDEX_TRIES):
            try:
                written = self._rebuild_index(client, key, days, own)
            except BuildmgrError:
                raise
            except Exception as err:  # pushes and reads of one tag at the same moment (the registry: 400, 500)
                if unreachable(err) is not None or attempt == _INDEX_TRIES - 1:
                    raise
                written = None
            if written is not None:
                return written
            time.sleep(random.uniform(0.02, 0.2))  # apart from the others, the next try
        raise RepoError(f"{self.text}: other publishers kept changing its index ({_INDEX_TRIES} tries); publish again")

    def _rebuild_index(
        self, client: Registry, key: signing.SecretKey | None, days: int, own: index.Entry | None
    ) -> index.Index | None:
        """One try of `_push_index`: the index it pushed, or None where a tag came that it does not hold."""
        tags = self._tags(client)
        files = self._index_files(client, None)
        last = _parse_index(self.text, files.data) if files is not None else index.EMPTY
        known = {e.sha256: e for e in last.artifacts} | ({own.sha256: own} if own is not None else {})
        entries = []
        for tag in (t for t in tags if t.startswith(OCI_TAG)):
            entry = known.get(tag[len(OCI_TAG) :]) or self._tagged(client, tag)
            if entry is not None:
                entries.append(self._cosigned(entry, tags))
        rebuilt = index.Index(index.SCHEMA, tuple(sorted(entries, key=lambda e: (e.name, e.sha256))), last.version)
        written = rebuilt.next(_expiry(days) if key is not None else None)
        self._push_index_files(client, written, key)
        return written if _holds_every_tag(written, self._tags(client)) else None

    def _tagged(self, client: Registry, tag: str) -> index.Entry | None:
        """The entry an archive's tag holds (None: the tag is gone), which must be the digest the tag names."""
        manifest = self._manifest(client, tag)
        if manifest is None:
            return None
        entry = self._entry_of(client, manifest)
        if tag != f"{OCI_TAG}{entry.sha256}":
            raise RepoError(f"{self.text}: the manifest tagged {tag} describes {entry.sha256[:12]}…")
        return entry

    def _push_index_files(self, client: Registry, written: index.Index, key: signing.SecretKey | None) -> None:
        """index.json and its .minisig, the layers of a manifest tagged `index` (and `index-<KEY ID>`): a host
        checks the signature over the bytes of that very layer."""
        data = written.to_text().encode()
        with tempfile.TemporaryDirectory(prefix="buildmgr-oci-") as scratch:
            path = Path(scratch) / index.INDEX
            path.write_bytes(data)
            files = [f"{path}:{INDEX_MEDIA_TYPE}"]
            if key is not None:
                signature = Path(scratch) / index.INDEX_SIGNATURE
                signature.write_text(key.sign(data, index.signature_comment(written)))
                files.append(f"{signature}:{MEDIA_TYPES[index.MINISIG]}")
            config = Path(scratch) / "index-config.json"
            signer = key.public.id if key is not None else None
            config.write_text(json.dumps({"version": written.version, "signed_by": signer, "expires": written.expires}))
            for tag in ([f"{OCI_INDEX_TAG}-{signer}"] if signer is not None else []) + [OCI_INDEX_TAG]:
                client.push(
                    target=self._container(tag),
                    files=files,
                    manifest_config=f"{config}:{INDEX_CONFIG_MEDIA_TYPE}",
                    manifest_annotations={"org.opencontainers.image.title": index.INDEX},
                    disable_path_validation=True,
                    quiet=True,
                )

    def _push_signature(
        self, client: Registry, artifact: Artifact, data: bytes, key: signing.SecretKey, builder: str
    ) -> None:
        """A later signer's .minisig and attestation, a manifest of their own tagged by its key and the archive's
        digest: the archive's manifest, and so the first signer's files, are not pushed again, and two signers at
        once never write the same tag."""
        with tempfile.TemporaryDirectory(prefix="buildmgr-oci-") as scratch:
            files = []
            for suffix, signed in _statement_files(artifact, data, key, builder).items():
                path = Path(scratch) / f"{artifact.path.name}{suffix}"
                path.write_bytes(signed)
                files.append(f"{path}:{MEDIA_TYPES[suffix]}")
            config = Path(scratch) / "signature.json"
            config.write_text(json.dumps({"name": artifact.path.name, "sha256": artifact.sha256, "key": key.public.id}))
            client.push(
                target=self._container(f"{OCI_SIGNATURE_TAG}{key.public.id}-{artifact.sha256}"),
                files=files,
                manifest_config=f"{config}:{SIGNATURE_MEDIA_TYPE}",
                manifest_annotations={"org.opencontainers.image.title": artifact.path.name},
                disable_path_validation=True,
                quiet=True,
            )


def _holds_every_tag(written: index.Index, tags: list[str]) -> bool:
    """Whether the index lists every archive tagged, with every later signer its signature tags name."""
    signers = {e.sha256: set(e.signers) for e in written.artifacts}
    for tag in tags:
        if tag.startswith(OCI_TAG) and tag[len(OCI_TAG) :] not in signers:
            return False
        if (m := _SIGNATURE_TAG.fullmatch(tag)) and m[2] in signers and m[1] not in signers[m[2]]:
            return False
    return True
