"""An artifact read: checked without writing anything (`open_artifact`), or checked as it is extracted into staging,
nothing of it used before every check passed (`unpack`)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import re
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO

from buildmgr.artifacts.archive import MANIFEST
from buildmgr.core.errors import UserError
from buildmgr.core.extract import unsafe_entry
from buildmgr.core.jsonshape import ShapeError
from buildmgr.store.receipt import FILE_NAME as RECEIPT
from buildmgr.store.receipt import SCHEMA as RECEIPT_SCHEMA
from buildmgr.store.receipt import Receipt


@dataclass(frozen=True)
class Artifact:
    path: Path
    sha256: str
    top: str
    receipt: Receipt
    receipt_sha256: str  # of the receipt's bytes in the archive: what a signature's provenance names


class BadArchive(UserError):
    """An archive whose own content is refused (an unsafe entry, a manifest or receipt that does not match, bytes
    that are no .tar.gz): the user's file for install-artifact, a repository's fault for install --from."""


def _bad(path: Path, why: str, refusing: str = "install") -> BadArchive:
    return BadArchive(f"{path.name}: {why}; refusing to {refusing} it")


def _read_checksum(path: Path) -> str:
    checksum = path.with_name(path.name + ".sha256")
    try:
        fields = checksum.read_text(encoding="utf-8").split()
    except OSError:
        raise UserError(
            f"{path.name}: no {checksum.name} beside it; an artifact comes with its checksum file"
        ) from None
    if len(fields) < 2 or not re.fullmatch(r"[0-9a-f]{64}", fields[0]) or fields[1].lstrip("*") != path.name:
        raise _bad(path, f"{checksum.name} is not a sha256sum line for it")
    return fields[0]


def _valid_receipt(path: Path, data: bytes, refusing: str = "install") -> Receipt:
    try:
        receipt = Receipt.from_text(data)
    except ShapeError as err:
        raise _bad(
            path, f"its {RECEIPT} is not a buildmgr receipt of schema {RECEIPT_SCHEMA} ({err})", refusing
        ) from None
    if receipt.runtime is None:
        raise _bad(path, f"its {RECEIPT} has no runtime needs (an artifact of an older buildmgr)", refusing)
    return receipt


def _manifest_line(line: str) -> tuple[str, str]:
    """`DIGEST  NAME` → (NAME, DIGEST)."""
    digest, name = line.split("  ", 1)
    return name, digest


class _Hashed:
    """The archive's bytes as tarfile reads them, hashed on the way: its sha256 costs no pass of its own."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.digest = handle, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data

    def rest(self) -> str:
        """The digest of the whole file, reading what tarfile left (gzip's trailer, padding)."""
        while self.read(_BLOCK):
            pass
        return self.digest.hexdigest()


_BLOCK = 1 << 20


class _Refused(ValueError):
    """An entry the writer will not write: the archive's fault, said as such."""


class _Writer:
    """Files written into staging as they come out of the stream, only below folders written before them (so no
    entry can write through a link), with the modes of tarfile's "data" filter (no setuid, no write for others)."""

    def __init__(self, root: Path) -> None:
        self.root, self.folders = root, {""}

    def _target(self, relative: str) -> str:
        parent = posixpath.dirname(relative)
        if parent not in self.folders:
            raise _Refused(f"{relative!r} is below {parent!r}, which is not a folder written before it")
        return os.path.join(self.root, relative)

    @contextlib.contextmanager
    def _writing(self, relative: str) -> Iterator[None]:
        """A name that is there already is the archive's conflict; any other failure (a full disk) is the host's."""
        try:
            yield
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            raise _Refused(f"{relative!r} comes twice, or as a file and a folder") from None

    def folder(self, relative: str) -> None:
        with self._writing(relative):
            os.mkdir(self._target(relative), 0o755)
        self.folders.add(relative)

    def link(self, relative: str, target: str) -> None:
        with self._writing(relative):
            os.symlink(target, self._target(relative))

    def file(self, relative: str, member: tarfile.TarInfo, data: IO[bytes], digest: Any) -> None:
        mode = (member.mode & 0o755) | 0o600
        with self._writing(relative):
            fd = os.open(self._target(relative), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, mode)  # the umask does not narrow it
            while block := data.read(_BLOCK):
                digest.update(block)
                out.write(block)
            out.flush()
            with contextlib.suppress(OverflowError, ValueError, OSError):  # a time out of range: nothing reads it
                os.utime(fd, (member.mtime, member.mtime))


def _leaves(links: Mapping[str, str]) -> str | None:
    """The first link that, followed through the others (a chain like `d -> .`, `e -> d/d/../..`), leads out of the
    tree, where each alone stays in it; None if none does."""
    for start in sorted(links):
        parts: list[str] = []
        pending = start.split("/")
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    return start
                parts.pop()
                continue
            parts.append(part)
            here = "/".join(parts)
            if here in links:
                hops += 1
                if hops > 40:  # the loader's own limit is of this order: a loop is refused, not followed
                    return start
                parts.pop()
                pending = links[here].split("/") + pending
    return None


def open_artifact(path: Path, refusing: str = "install") -> Artifact:
    """Check the .sha256, every entry's path, the manifest and the receipt; raise UserError on any doubt, saying
    what is refused (`refusing`: install, verify, publish). Nothing is written."""
    if path.is_dir():
        raise UserError(f"{path} is a directory: name the artifact's .tar.gz")
    if path.name.endswith(".tar.gz.sha256"):
        raise UserError(f"{path.name} is the checksum file: name the archive, {path.name.removesuffix('.sha256')}")
    if not path.is_file():
        raise UserError(f"{path}: no such artifact file")
    return _read(path, (_read_checksum(path), "its .sha256 says"), refusing, None)


def unpack(path: Path, sha256: str, staging: Path) -> Artifact:
    """`open_artifact`'s checks and the extraction, in one pass over the stream: each file is hashed as it is
    written into the empty `staging` (without the top folder and the manifest), and `sha256` (the digest the
    caller checked) is the archive's still. On any doubt UserError, and the caller discards staging."""
    return _read(path, (sha256, "it was checked as"), "install", _Writer(staging))


def _read(path: Path, expected: tuple[str, str], refusing: str, writer: _Writer | None) -> Artifact:
    """The one pass of both: `expected` is the digest and who says so."""
    hashes: dict[str, str] = {}
    links: dict[str, str] = {}
    texts: dict[str, bytes] = {}
    seen: set[str] = set()
    top = ""
    failed: UserError | None = None
    with open(path, "rb") as raw:
        hashed = _Hashed(raw)
        try:
            # one pass over the stream (a seek back in a .tar.gz decompresses it again from the start)
            with tarfile.open(fileobj=hashed, mode="r|gz") as tar:  # type: ignore[call-overload]
                for member in tar:
                    parts = PurePosixPath(member.name).parts
                    top = top or (parts[0] if parts else "")
                    reason = unsafe_entry(member, PurePosixPath(top))
                    if reason:
                        raise _bad(path, f"unsafe entry {member.name!r} ({reason})", refusing)
                    if not parts or parts[0] != top:
                        raise _bad(
                            path,
                            f"expected one top-level folder, found more ({parts[0] if parts else '.'!r})",
                            refusing,
                        )
                    relative = str(PurePosixPath(member.name).relative_to(top)) if member.name != top else ""
                    if relative in seen:  # the last would win on reading, the first on writing: neither is sure
                        raise _bad(path, f"entry {member.name!r} comes twice", refusing)
                    seen.add(relative)
                    if member.isfile():
                        handle = tar.extractfile(member)
                        assert handle is not None
                        if relative in (MANIFEST, RECEIPT):
                            texts[relative] = handle.read()
                            hashes[relative] = hashlib.sha256(texts[relative]).hexdigest()
                            if writer is not None and relative == RECEIPT:
                                writer.file(relative, member, io.BytesIO(texts[relative]), hashlib.sha256())
                        elif writer is not None:
                            digest = hashlib.sha256()
                            writer.file(relative, member, handle, digest)
                            hashes[relative] = digest.hexdigest()
                        else:
                            hashes[relative] = hashlib.file_digest(handle, "sha256").hexdigest()
                    elif member.issym():
                        links[relative] = member.linkname
                        if writer is not None:
                            writer.link(relative, member.linkname)
                    elif not member.isdir():
                        raise _bad(path, f"entry {member.name!r} is neither a file, a folder nor a link", refusing)
                    elif writer is not None and relative:
                        writer.folder(relative)
        except UserError as err:
            failed = err
        except _Refused as err:
            failed = _bad(path, f"entry {err}", refusing)
        except (tarfile.TarError, EOFError, ValueError) as err:
            failed = _bad(path, f"not a readable .tar.gz ({err})", refusing)
        except OSError as err:
            if writer is not None:  # writing staging failed (a full disk): the host's, said with its path
                raise
            failed = _bad(path, f"not a readable .tar.gz ({err})", refusing)
        actual = hashed.rest()
    wanted, says = expected
    if actual != wanted:  # said first: whatever else is wrong with it, it is not the archive that was vouched for
        raise _bad(path, f"checksum mismatch (sha256 {actual[:12]}…, {says} {wanted[:12]}…)", refusing)
    if failed is not None:
        raise failed
    if RECEIPT not in texts:
        raise _bad(path, f"no {RECEIPT} in it (not a buildmgr artifact)", refusing)
    if MANIFEST not in texts:
        raise _bad(path, f"no {MANIFEST} in it (not a buildmgr artifact)", refusing)
    escaping = _leaves(links)
    if escaping is not None:
        raise _bad(path, f"unsafe entry {escaping!r} (with the other links, it leads out of the tree)", refusing)
    try:
        listed = dict(_manifest_line(line) for line in texts[MANIFEST].decode("utf-8", "replace").splitlines())
    except ValueError:
        raise _bad(path, f"its {MANIFEST} is not sha256sum lines", refusing) from None
    files = {name: digest for name, digest in hashes.items() if name != MANIFEST}
    if listed != files:
        differ = sorted(set(listed.items()) ^ set(files.items()))
        raise _bad(
            path, f"its files do not match its {MANIFEST} ({', '.join(sorted({n for n, _ in differ})[:5])})", refusing
        )
    receipt = _valid_receipt(path, texts[RECEIPT], refusing)
    contents = {name: digest for name, digest in files.items() if name != RECEIPT}
    contents |= {name: f"link:{target}" for name, target in links.items()}
    if contents != receipt.files:
        differ = sorted(set(contents.items()) ^ set(receipt.files.items()))
        raise _bad(
            path, f"its files do not match its receipt ({', '.join(sorted({n for n, _ in differ})[:5])})", refusing
        )
    return Artifact(path, actual, top, receipt, hashes[RECEIPT])
