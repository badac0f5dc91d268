"""A repository as a directory: `index.json` and `blobs/sha256/<digest>/<name>{,.sha256,.minisig,.intoto.json}`
(`Layout`, which the http(s) transport reads too), written under a lock by `publish`; nothing a reader sees is ever
half written (a blob copied to a temporary name, checked and renamed, the index replaced atomically, last)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import stat
from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from buildmgr.artifacts import index
from buildmgr.artifacts.repo import policy
from buildmgr.artifacts.repo.base import (
    IndexFiles,
    Progress,
    Published,
    Repo,
    append,
    capped,
    declared,
    parse_index,
)
from buildmgr.artifacts.unpack import Artifact
from buildmgr.core.errors import RepositoryFault, UserError
from buildmgr.core.fsutil import atomic_write_bytes, atomic_write_text, fsync_file, locked, sha256_file
from buildmgr.trust import signing

LOCK = ".lock"


class DirectoryLayout(Repo):
    """index.json and blobs/sha256/<digest>/<name>{,.sha256,.minisig,.intoto.json}: a directory's layout."""

    @abstractmethod
    def read(self, relative: str) -> bytes | None:
        """A small file of the repository (None: not there)."""

    def listing(self) -> index.Index:
        return parse_index(self.text, self.read(index.INDEX))

    def index_files(self, key_id: str | None = None) -> IndexFiles | None:
        where = index.INDEX if key_id is None else index.key_index(key_id)
        data = self.read(where)
        return IndexFiles(data, self.read(where + index.MINISIG)) if data is not None else None

    def signatures(self, entry: index.Entry, key_id: str | None = None) -> dict[str, bytes]:
        where = entry.signature_path(key_id)
        found = {suffix: self.read(where + suffix) for suffix in (index.MINISIG, index.ATTESTATION)}
        return {suffix: data for suffix, data in found.items() if data is not None}


def open_regular(path: Path) -> io.BufferedReader:
    """A directory repository's file opened for reading, refused unless it is a regular file: a FIFO would wait for
    a writer for ever, a device (a link to /dev/zero) never ends. O_NONBLOCK so that opening a FIFO does not wait;
    the check is on what was opened, so nothing swapped in after it is read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RepositoryFault(
                f"cannot read {path}: it is not a regular file (a FIFO, a device or a link to one, which may never end)"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class DirRepo(DirectoryLayout):
    text: str
    path: Path

    @property
    def identity(self) -> str:
        return str(self.path)  # absolute and normalized (`location.directory_identity`), links not followed

    def read(self, relative: str) -> bytes | None:
        try:
            with open_regular(self.path / relative) as handle:
                return capped(handle.read1, str(self.path / relative))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise RepositoryFault(
                f"cannot read {self.path / relative}: {getattr(err, 'strerror', None) or err}"
            ) from None

    def _download(self, entry: index.Entry, part: Path, have: int, progress: Progress | None) -> None:
        with open_regular(self.path / entry.path) as src:
            declared(entry.size, os.fstat(src.fileno()).st_size)
            src.seek(have)
            append(src, part, "ab", have, entry.size, progress, None)

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
        with _writing(root):
            current = self.listing() if (root / index.INDEX).exists() else index.EMPTY
            known = current.find(digest)
            if policy.is_known(known, artifact, key):
                assert known is not None
                return Published(known, True)
            data = policy.read_checked(artifact)
            if policy.cosigns(self.text, known, artifact, key):
                assert known is not None and key is not None
                for suffix, signed in policy.statement_files(artifact, data, key, builder).items():
                    atomic_write_text(root / f"{known.signature_path(key.public.id)}{suffix}", signed.decode())
                cosigned = dataclasses.replace(known, also_signed_by=(*known.also_signed_by, key.public.id))
                written = _write_index(root, current.with_entry(cosigned), key, days)
                return Published(cosigned, True, key.public.id, written)
            blob = root / index.BLOBS / digest
            blob.mkdir(parents=True, exist_ok=True)
            _place(data, blob / name, digest)
            atomic_write_text(blob / f"{name}.sha256", f"{digest}  {name}\n")
            signed_files = policy.statement_files(artifact, data, key, builder) if key is not None else {}
            for suffix, text in signed_files.items():
                atomic_write_text(blob / f"{name}{suffix}", text.decode())
            entry = policy.entry_of(artifact, len(data), key, known)
            written = _write_index(root, current.with_entry(entry), key, days)
        return Published(entry, known is not None, key.public.id if key is not None else None, written)

    def sign_index(self, key: signing.SecretKey, days: int = index.EXPIRES_DAYS) -> index.Index:
        root = self.path
        if not (root / index.INDEX).is_file():
            raise UserError(f"{self.text}: no {index.INDEX} here to sign (publish an archive to it first)")
        with _writing(root):
            return _write_index(root, self.listing(), key, days)


@contextlib.contextmanager
def _writing(root: Path) -> Iterator[None]:
    """The repository's lock, held while it is written and removed before it is let go (`locked` takes the file that
    is there then): a static web server that serves the directory never serves a lock file."""
    with locked(root / LOCK):
        try:
            yield
        finally:
            (root / LOCK).unlink(missing_ok=True)


def _write_index(root: Path, current: index.Index, key: signing.SecretKey | None, days: int) -> index.Index:
    """The next version of the index in place (under the repository's lock), signed with `key` and kept as the last
    one that key signed too. A reader never pairs new bytes with an old signature: the signature goes first, and
    comes back after the bytes (a reader in between finds the key's own copy, whole)."""
    own = None if key is None or current.repository is not None else _read_own(root, key.public.id)
    written = policy.named(current, key, own).next(policy.expiry(days) if key is not None else None)
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


def _read_own(root: Path, key_id: str) -> IndexFiles | None:
    """The last index `key_id` signed here, and its .minisig, as the repository holds them."""
    copy = root / index.key_index(key_id)
    try:
        return IndexFiles(copy.read_bytes(), copy.with_name(copy.name + index.MINISIG).read_bytes())
    except OSError:
        return None


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
