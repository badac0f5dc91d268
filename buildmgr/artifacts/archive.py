"""The artifact format, written here alone: a byte-identical `.tar.gz` of a build (sorted entries, fixed times, owner
0, gzip mtime 0) with its `.sha256`, `MANIFEST.sha256` and the receipt (its reading: `unpack`)."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from buildmgr import backends, store
from buildmgr.artifacts.names import SYSTEM, artifact_stem, cpu_arch_of
from buildmgr.building.source.tree import build_label, version_label
from buildmgr.core.errors import BuildFailed, UserError
from buildmgr.core.fsutil import atomic_write_text, fsync_file, sha256_file, umask_mode
from buildmgr.store.receipt import FILE_NAME as RECEIPT
from buildmgr.store.receipt import Receipt
from buildmgr.tools import compile_cache

MANIFEST = "MANIFEST.sha256"
_GZIP_LEVEL = 6  # what `tar -czf` uses: level 9 is slower for about 1 % less
_RECEIPT_LIMIT = 16 << 20  # a receipt read only to name its build: a larger one is no receipt


@dataclass(frozen=True)
class Packaged:
    build: store.Build
    archive: Path
    checksum: Path
    sha256: str
    size: int

    def to_json(self) -> dict[str, Any]:
        """`package --json` (spec): the archive, and what the build is and needs."""
        receipt = self.build.receipt
        needs = receipt.runtime  # package() refuses a build without it
        assert needs is not None
        code = {code.key: list(needs.device_code.get(name, ())) for name, code in backends.device_codes()}
        return {
            "id": self.build.id,
            "archive": str(self.archive),
            "checksum_file": str(self.checksum),
            "sha256": self.sha256,
            "size": self.size,
            "recipe": self.build.recipe,
            "backends": list(receipt.backends),
            "smoke_passed": receipt.smoke.passed,
            "smoke_devices": list(receipt.smoke.devices),
            "ccache_hit_rate": compile_cache.hit_rate(receipt.ccache),
            "glibc": needs.glibc,
            "needed": sorted(needs.needed),
        } | code


def receipt_stem(receipt: Receipt) -> str:
    source, host = receipt.source, receipt.host
    system = SYSTEM.get(host.system, host.system.lower())
    label = build_label(source.build_number, source.state or "pinned", source.commit, source.fingerprint)
    return artifact_stem(label, system, receipt.recipe.name, receipt.recipe.arch, cpu_arch_of(host.machine))


def source_date_epoch(environ: Mapping[str, str], receipt: Receipt) -> int:
    """SOURCE_DATE_EPOCH if set, else the source's commit time, else the build's finish (still one per build)."""
    text = environ.get("SOURCE_DATE_EPOCH")
    if text is not None:
        if not text.isdigit():
            raise UserError(f"SOURCE_DATE_EPOCH={text!r} must be a whole number of seconds since 1970")
        return int(text)
    if receipt.source.commit_time is not None:
        return receipt.source.commit_time
    from datetime import datetime

    return int(datetime.fromisoformat(receipt.finished).timestamp())


def _entries(prefix: Path) -> list[tuple[str, Path]]:
    return sorted((str(p.relative_to(prefix)), p) for p in prefix.rglob("*"))


def _tar_info(name: str, path: Path | None, epoch: int, size: int = 0) -> tarfile.TarInfo:
    """An entry that says nothing about where or when it was packed: owner 0, no names, fixed time, 644/755."""
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
    if path is None:
        info.type, info.mode, info.size = tarfile.REGTYPE, 0o644, size
    elif path.is_symlink():
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
    elif path.is_dir():
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.type, info.size = tarfile.REGTYPE, path.stat().st_size
        info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
    return info


def package(build: store.Build, out_dir: Path, environ: Mapping[str, str]) -> Packaged:
    receipt = build.receipt
    if receipt.runtime is None:
        raise UserError(
            f"build {build.id} has no runtime needs in its receipt (built by an older buildmgr); "
            f"build it again with --rebuild, then package it"
        )
    changed = sorted(set(store.file_hashes(build.prefix).items()) ^ set(receipt.files.items()))
    if changed:
        names = sorted({name for name, _ in changed})
        raise BuildFailed(f"{build.prefix} no longer matches its receipt ({', '.join(names[:5])}); rebuild it")
    epoch = source_date_epoch(environ, receipt)
    stem = receipt_stem(receipt)
    entries = _entries(build.prefix)
    manifest = "".join(f"{sha256_file(p)}  {n}\n" for n, p in entries if p.is_file() and not p.is_symlink())
    archive = out_dir / f"{stem}.tar.gz"
    # one name for every build of a recipe at a commit (upstream's release names): a second build's archive would
    # silently replace the first's, so only the same build's is written over
    if archive.exists() and (held := archived_build(archive)) != build.id:
        held_by = f"build {held}'s archive" if held else "a file that is no buildmgr archive"
        raise UserError(
            f"{archive} is {held_by}, not {build.id}'s; package into another folder (-o) or remove it first"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{stem}.", suffix=".tmp")
    os.fchmod(fd, umask_mode())
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=_GZIP_LEVEL) as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            tar.addfile(_tar_info(stem, build.prefix, epoch))
            rows: list[tuple[str, Path | None]] = [*entries, (MANIFEST, None)]
            for name, path in sorted(rows, key=lambda row: row[0]):
                if path is None:
                    data = manifest.encode()
                    tar.addfile(_tar_info(f"{stem}/{name}", None, epoch, len(data)), io.BytesIO(data))
                elif path.is_file() and not path.is_symlink():
                    with open(path, "rb") as handle:
                        tar.addfile(_tar_info(f"{stem}/{name}", path, epoch), handle)
                else:
                    tar.addfile(_tar_info(f"{stem}/{name}", path, epoch))
        fsync_file(archive_tmp := Path(tmp))
        os.replace(archive_tmp, archive)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    digest = sha256_file(archive)
    checksum = out_dir / f"{archive.name}.sha256"
    atomic_write_text(checksum, f"{digest}  {archive.name}\n")
    return Packaged(build, archive, checksum, digest, archive.stat().st_size)


def archived_build(path: Path) -> str | None:
    """The build id an archive's receipt names (None: not readable as one), read as a stream up to its receipt: only
    to tell whose archive a name holds, never to trust it (open_artifact checks an archive)."""
    try:
        with tarfile.open(path, "r|gz") as tar:
            for info in tar:
                if info.isfile() and info.name.count("/") == 1 and info.name.endswith(f"/{RECEIPT}"):
                    handle = tar.extractfile(info)
                    data = json.loads(handle.read(_RECEIPT_LIMIT)) if handle is not None else None
                    found = data.get("id") if isinstance(data, dict) else None
                    return found if isinstance(found, str) else None
    except (OSError, tarfile.TarError, ValueError, EOFError):
        return None
    return None


def prefix_for(builds_dir: Path, receipt: Receipt) -> Path:
    source = receipt.source
    return builds_dir / version_label(source.llama_version, source.commit, source.fingerprint) / receipt.id
