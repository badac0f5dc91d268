"""Binary repositories: a directory (a shared file system, or anything a static web server serves) written by
`publish` under a lock, and the same layout read over http(s). `index.json` lists every archive (`index.Entry`); an
archive's files lie under `blobs/sha256/<digest>/`. Nothing a reader sees is ever half written: each blob is
copied to a temporary name, checked and renamed, and the index replaced atomically, last."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from buildmgr import signing
from buildmgr.artifacts import index
from buildmgr.artifacts.archive import Artifact
from buildmgr.errors import RepositoryFault, UserError
from buildmgr.fsutil import atomic_write_text, fsync_file, locked, sha256_file
from buildmgr.jsonshape import NewerSchema, ShapeError

LOCK = ".lock"
_BLOCK = 1 << 20
HTTP_TIMEOUT_S = 30.0

Progress = Callable[[int, int], None]  # (bytes so far, bytes in all)


RepoError = RepositoryFault


@dataclass(frozen=True)
class Repo:
    """Where a repository is: a directory, or an http(s) URL (read-only)."""

    text: str
    path: Path | None = None
    url: str | None = None

    @classmethod
    def parse(cls, text: str) -> Repo:
        scheme = urllib.parse.urlsplit(text).scheme
        if scheme in ("http", "https"):
            return cls(text, url=text if text.endswith("/") else text + "/")
        if scheme == "oci":
            raise UserError(
                f"{text}: OCI registries are not supported by this buildmgr yet; use a directory, or http(s):// "
                "for one a web server serves"
            )
        if scheme == "file":
            return cls(text, path=Path(urllib.parse.unquote(urllib.parse.urlsplit(text).path)))
        if scheme and len(scheme) > 1:
            raise UserError(f"{text}: a repository is a directory, or an http(s):// URL")
        return cls(text, path=Path(text))

    # --- reading ------------------------------------------------------------------------------------------

    def read(self, relative: str) -> bytes | None:
        """A small file of the repository (None: not there)."""
        if self.path is not None:
            try:
                return (self.path / relative).read_bytes()
            except FileNotFoundError:
                return None
            except OSError as err:
                raise RepoError(f"cannot read {self.path / relative}: {err.strerror}") from None
        assert self.url is not None
        try:
            with urllib.request.urlopen(self.url + relative, timeout=HTTP_TIMEOUT_S) as response:
                data: bytes = response.read()
                return data
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise RepoError(f"{self.url + relative}: HTTP {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            raise RepoError(f"cannot reach {self.url + relative}: {getattr(err, 'reason', err)}") from None

    def index(self) -> index.Index:
        data = self.read(index.INDEX)
        if data is None:
            raise UserError(f"{self.text}: no {index.INDEX} here (not a buildmgr repository, or nothing published)")
        try:
            return index.Index.from_text(data)
        except NewerSchema as err:
            raise RepoError(f"{self.text}/{index.INDEX}: {err}: upgrade buildmgr") from None
        except ShapeError as err:
            raise RepoError(f"{self.text}/{index.INDEX} is not a buildmgr index ({err})") from None

    def fetch(self, relative: str, dest: Path, size: int, progress: Progress | None = None) -> None:
        """`relative` into `dest`, resuming a `dest.part` an earlier attempt left; `dest` appears only complete."""
        part = dest.with_name(dest.name + ".part")
        part.parent.mkdir(parents=True, exist_ok=True)
        have = part.stat().st_size if part.exists() else 0
        if have > size:
            part.unlink()
            have = 0
        try:
            if self.path is not None:
                self._copy(self.path / relative, part, have, size, progress)
            else:
                self._download(relative, part, have, size, progress)
        except FileNotFoundError:
            raise RepoError(f"{self.text}: {relative} is in the index but not in the repository") from None
        except (OSError, http.client.HTTPException) as err:
            raise RepoError(
                f"reading {relative} from {self.text} failed ({getattr(err, 'reason', None) or err}); "
                f"{part.stat().st_size if part.exists() else 0} of {size} bytes are kept and the next try resumes"
            ) from None
        got = part.stat().st_size
        if got < size:
            raise RepoError(
                f"reading {relative} from {self.text} stopped after {got} of {size} bytes; they are kept and the "
                "next try resumes"
            )
        if got > size:
            part.unlink()
            raise RepoError(f"{self.text}: {relative} has {got} bytes, and its index says {size}")
        fsync_file(part)
        os.replace(part, dest)

    @staticmethod
    def _copy(source: Path, part: Path, have: int, size: int, progress: Progress | None) -> None:
        with open(source, "rb") as src, open(part, "ab") as out:
            src.seek(have)
            while block := src.read(_BLOCK):
                out.write(block)
                have += len(block)
                if progress:
                    progress(have, size)

    def _download(self, relative: str, part: Path, have: int, size: int, progress: Progress | None) -> None:
        assert self.url is not None
        request = urllib.request.Request(self.url + relative, headers={"Range": f"bytes={have}-"} if have else {})
        try:
            response = urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise FileNotFoundError(relative) from None
            if err.code == 416 and have == size:  # everything is here already
                return
            raise
        with response, open(part, "ab" if response.status == 206 else "wb") as out:
            have = have if response.status == 206 else 0
            while block := response.read(_BLOCK):
                out.write(block)
                have += len(block)
                if progress:
                    progress(have, size)


# --- publishing into a directory ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Published:
    entry: index.Entry
    already: bool  # the same archive (and signature) was there: nothing was written


def _place(source: Path, dest: Path, sha256: str) -> None:
    """Copy under a temporary name, check the copy's digest, rename: a blob is whole or absent."""
    if dest.is_file() and sha256_file(dest) == sha256:
        return
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        shutil.copyfile(source, tmp)
        fsync_file(tmp)
        if sha256_file(tmp) != sha256:
            raise RepoError(f"{source.name} changed while it was being published; try again")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def publish(repo: Repo, artifact: Artifact, key: signing.SecretKey | None, builder: str) -> Published:
    """Put a checked artifact, its checksum and (with `key`) its .minisig and attestation into a directory
    repository, then the index. Under the repository's lock: two publishers at once lose nothing."""
    if repo.path is None:
        raise UserError(f"{repo.text}: an http(s) repository is read-only; publish to its directory")
    root = repo.path
    if root.exists() and not root.is_dir():
        raise UserError(f"--to {repo.text}: not a directory")
    root.mkdir(parents=True, exist_ok=True)
    name, digest = artifact.path.name, artifact.sha256
    summary = index.summary_of(artifact.receipt, artifact.receipt_sha256)
    with locked(root / LOCK):
        current = repo.index() if (root / index.INDEX).exists() else index.EMPTY
        known = current.find(digest)
        signed_by = key.public.id if key is not None else None
        if known is not None and known.name == name and (key is None or known.signed_by == signed_by):
            return Published(known, True)
        blob = root / index.BLOBS / digest
        blob.mkdir(parents=True, exist_ok=True)
        _place(artifact.path, blob / name, digest)
        atomic_write_text(blob / f"{name}.sha256", f"{digest}  {name}\n")
        if key is not None:
            comment = f"file:{name} sha256:{digest} build:{summary.id}"
            atomic_write_text(blob / f"{name}{index.MINISIG}", key.sign((blob / name).read_bytes(), comment))
            statement = index.statement(name, digest, artifact.receipt, artifact.receipt_sha256, builder)
            atomic_write_text(
                blob / f"{name}{index.ATTESTATION}", json.dumps(signing.envelope(statement, key), indent=2) + "\n"
            )
        entry = index.Entry(
            name,
            digest,
            artifact.path.stat().st_size,
            datetime.now(UTC).isoformat(timespec="seconds"),
            summary,
            signed_by if key is not None else (known.signed_by if known is not None else None),
        )
        atomic_write_text(root / index.INDEX, current.with_entry(entry).to_text())
    return Published(entry, False)
