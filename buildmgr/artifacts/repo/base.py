"""The interface every kind of repository has (`Repo`), and what reading one is bounded by: small files read whole
up to `METADATA_MAX`, an archive read up to its signed size and no further."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from buildmgr.artifacts import index
from buildmgr.artifacts.repo.net import (
    MIN_RATE,
    NO_LIMITS_GIVEN,
    SETTING,
    Limits,
    Pace,
    TooSlow,
    read_small,
    transport_errors,
    unreachable,
    within,
)
from buildmgr.artifacts.unpack import Artifact
from buildmgr.core.errors import NetworkFault, RepositoryFault, UserError
from buildmgr.core.jsonshape import NewerSchema, ShapeError
from buildmgr.trust import signing

_BLOCK = 1 << 20
# An index, a signature, a manifest or an entry is read whole into memory before any check: past this, none is what a
# repository should serve (an index of a thousand archives is well under 1 MiB), and reading on is what a hostile
# server wants. Archives are read by their signed size instead.
METADATA_MAX = 16 << 20

Progress = Callable[[int, int], None]  # (bytes so far, bytes in all)


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


class Larger(Exception):
    """The source had more bytes than the index's size (`Repo.fetch` says which archive)."""


class Other(Exception):
    """The source says its file is of another size than the index's: another file (`Repo.fetch` says which)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def declared(size: int, total: int | None) -> None:
    """The archive's size as its source says it (a file's, an http body's whole length), against the index's:
    larger raises `Larger` before a byte is read, smaller `Other` (not the archive cut short: another one)."""
    if total is not None and total > size:
        raise Larger
    if total is not None and total < size:
        raise Other(total)


def http_total(status: int, header: Callable[[str], str | None]) -> int | None:
    """The whole file's length an http answer declares (`header`: its headers' get): a 200's Content-Length, a
    206's Content-Range total (None: not said, or said of an encoded body)."""
    if header("Content-Encoding") not in (None, "identity"):
        return None
    said = (header("Content-Range") or "").rpartition("/")[2] if status == 206 else header("Content-Length")
    return int(said) if said is not None and said.isascii() and said.isdigit() else None


def append(
    response: IO[bytes], part: Path, mode: str, have: int, size: int, progress: Progress | None, limits: Limits | None
) -> None:
    """Append what `response` sends up to `size` bytes in all, and no further: an endless source (a link to
    /dev/zero, a body that never ends) fills neither the cache nor the time. One byte past it raises `Larger`. Over
    the network (`limits`), a source slower than MIN_RATE raises `TooSlow`, and every read is cut off by `within`
    (a chunk's size line, or a chunked body's trailers, sent without end: inside one read, where no rate is seen)."""
    if progress:
        progress(have, size)  # where it starts: a resumed download says what it kept
    # read1: what has arrived, up to a block (read would wait for a whole block: no progress on a slow link, and
    # nothing kept of a download cut short inside one)
    read = getattr(response, "read1", response.read)
    pace = Pace(limits) if limits is not None else None

    def timed(count: int) -> bytes:
        if limits is None:
            return read(count)
        with within(limits, f"{part.name.removesuffix('.part')}'s next piece"):
            return read(count)

    with open(part, mode) as out:
        while have < size and (block := timed(min(_BLOCK, size - have))):
            out.write(block)
            out.flush()  # what arrived is kept if the process is killed: the next try resumes after it
            have += len(block)
            if progress:
                progress(have, size)
            if pace is not None:
                pace.arrived(len(block))
    if have >= size and timed(1):
        raise Larger


def capped(read: Callable[[int], bytes], where: str) -> bytes:
    """A small file (an index, a signature, a manifest) read whole, refused past METADATA_MAX."""
    return read_small(read, where, METADATA_MAX)


def parse_index(text: str, data: bytes | None, where: str = index.INDEX) -> index.Index:
    """A repository's index (`where`: which file of it), read checked: a name, digest or id that would become a
    path is refused as such; bytes that are no JSON, or nested deeper than any index, are one line (RepositoryFault)."""
    if data is None:
        raise UserError(f"{text}: no {where} here (not a buildmgr repository, or nothing published)")
    try:
        return index.Index.from_text(data)
    except NewerSchema as err:
        raise RepositoryFault(f"{text}/{where}: {err}: upgrade buildmgr") from None
    except ShapeError as err:
        raise RepositoryFault(f"{text}/{where} is not a buildmgr index this buildmgr reads ({err})") from None


class Repo(ABC):
    """Where a repository is, and how its index, archives and signature files are read (and, where it can be,
    written)."""

    text: str
    limits: Limits = NO_LIMITS_GIVEN  # how long its server may take (a directory's reads have no server)

    @abstractmethod
    def listing(self) -> index.Index: ...

    @property
    @abstractmethod
    def identity(self) -> str:
        """The repository as a pin names it (`key trust FILE --for REPO`), in its one spelling
        (`repo_location.identity`)."""

    def require(self) -> None:
        """UserError where there is no repository here (a directory without index.json, a registry without the
        repository), read as cheaply as the kind allows."""
        self.listing()

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

    @abstractmethod
    def publish(
        self, artifact: Artifact, key: signing.SecretKey | None, builder: str, days: int = index.EXPIRES_DAYS
    ) -> Published:
        """The archive, its checksum and (with `key`) its signature files put in, then the index one version more."""

    @abstractmethod
    def sign_index(self, key: signing.SecretKey, days: int = index.EXPIRES_DAYS) -> index.Index:
        """The index written again, one version more, signed by `key` with a new expiry (`publish` without an
        archive): a repository nothing is published to stays valid."""

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
        except Larger:
            part.unlink(missing_ok=True)  # bytes from a source that lies about its size are not kept
            raise RepositoryFault(
                f"{self.text}: {entry.name} is larger than its index says ({entry.size} bytes); reading stopped there "
                "and what came was deleted"
            ) from None
        except Other as err:
            part.unlink(missing_ok=True)
            raise RepositoryFault(
                f"{self.text}: {entry.name} is {err.size} bytes there, and its index says {entry.size}: not the "
                "archive that was published; what came was deleted"
            ) from None
        except TooSlow as err:
            raise NetworkFault(
                f"reading {entry.name} from {self.text}: it came at {err.rate / 1024:.1f} KiB/s over {err.window_s:.0f} "
                f"s, slower than {MIN_RATE >> 10} KiB/s (a server that dribbles, or a link that slow: {SETTING} "
                f"widens the window); {part.stat().st_size} of {entry.size} bytes are kept and the next try resumes"
            ) from None
        except FileNotFoundError:
            raise RepositoryFault(f"{self.text}: {entry.name} is in the index but not in the repository") from None
        except transport_errors() as err:
            why = unreachable(err, self.limits.timeout_s) or getattr(err, "reason", None) or err
            raise NetworkFault(
                f"reading {entry.name} from {self.text} failed ({why}); "
                f"{part.stat().st_size if part.exists() else 0} of {entry.size} bytes are kept and the next try resumes"
            ) from None
        got = part.stat().st_size if part.exists() else 0
        if got < entry.size:
            raise NetworkFault(
                f"reading {entry.name} from {self.text} stopped after {got} of {entry.size} bytes; they are kept and "
                "the next try resumes"
            )
        # not flushed: after a power loss a torn file fails its digest, which every use checks, and is fetched again
        os.replace(part, dest)
