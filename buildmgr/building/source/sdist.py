"""The pinned source: llama-cpp-python's sdist named in the lock, fetched by the user's own pip, checked and
extracted once."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from buildmgr.building.source.tree import MARKER, SourceTree, read_marker
from buildmgr.core import proc
from buildmgr.core.config import Dirs, resource_path
from buildmgr.core.errors import BuildFailed, UserError
from buildmgr.core.extract import safe_extract
from buildmgr.core.fsutil import atomic_write_text, locked, sha256_file


@dataclass(frozen=True)
class Pin:
    package: str
    version: str
    sha256: str
    subdir: str
    commit: str
    date: str
    llama_version: str
    ggml_version: str
    build_number: int

    @property
    def commit_time(self) -> int:
        """The commit's day at 00:00 UTC: the sdist carries the commit's date, not its time."""
        return int(datetime.fromisoformat(self.date).replace(tzinfo=UTC).timestamp())

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def sdist_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}.tar.gz"


def load_pin(path: Path | None = None) -> Pin:
    path = path or resource_path("vendor/llama.cpp.lock.toml")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))["source"]
        return Pin(**{name: table[name] for name in Pin.__dataclass_fields__})
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as err:
        raise UserError(f"{path}: not a valid source lock ({err})") from None


def _download_sdist(pin: Pin, dirs: Dirs) -> Path:
    """The user's own pip fetches the sdist, so their index settings apply. pip checks the lock's sha256 itself
    (hash-checking mode) before it prepares the sdist's metadata, so no code from an unverified sdist ever runs.
    That preparation uses this environment's scikit-build-core (a dependency of buildmgr) instead of installing one
    into a fresh build environment: 2.3 s less per fetch here, and no second trip to the index."""
    dirs.downloads.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dirs.downloads, prefix=".pip-") as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(f"{pin.requirement} --hash=sha256:{pin.sha256}\n", encoding="utf-8")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "--require-hashes",
            "--no-build-isolation",
            "-d",
            tmp,
            "-r",
            str(requirements),
        ]
        ran = proc.run(cmd)
        found = list(Path(tmp).glob("*.tar.gz"))
        if not ran.ok or len(found) != 1:
            output = ran.output
            tail = tuple(output.strip().splitlines()[-8:])
            if "DO NOT MATCH THE HASHES" in output:
                raise BuildFailed(
                    f"pip refused {pin.requirement}: its sha256 is not the lock's {pin.sha256[:8]}", tail=tail
                )
            raise BuildFailed(f"pip could not download {pin.requirement}", tail=tail)
        target = dirs.downloads / pin.sdist_name
        os.replace(found[0], target)
        return target


def verify_sdist(path: Path, pin: Pin) -> None:
    actual = sha256_file(path)
    if actual != pin.sha256:
        raise UserError(
            f"{path.name}: sha256 {actual} does not match the lock's {pin.sha256}; "
            "the index served a different file: check your pip index settings"
        )


def pinned_tree(pin: Pin, dirs: Dirs) -> SourceTree:
    return SourceTree(
        path=dirs.sources / f"llama.cpp-{pin.commit[:12]}",
        origin=f"pypi:{pin.requirement}",
        commit=pin.commit,
        build_number=pin.build_number,
        llama_version=pin.llama_version.split("-")[0],
        fingerprint=pin.commit,
        commit_time=pin.commit_time,
    )


def vendor_dir() -> Path:
    """`vendor/llama.cpp` beside the lock file of a buildmgr source checkout (git-ignored)."""
    lock = resource_path("vendor/llama.cpp.lock.toml")
    if "_data" in lock.parts:
        raise UserError("--vendor extracts into a buildmgr source checkout's vendor/; run it from a clone of buildmgr")
    return lock.parent / "llama.cpp"


def is_synced(tree: SourceTree, pin: Pin) -> bool:
    return read_marker(tree.path).get("sha256") == pin.sha256


def sync_pinned(pin: Pin, dirs: Dirs, archive: Path | None = None, target: Path | None = None) -> SourceTree:
    """Fetch (unless already there), verify, then extract the pinned tree (to `target`, e.g. vendor/llama.cpp, if
    given); idempotent."""
    tree = pinned_tree(pin, dirs)
    if target is not None:
        tree = dataclasses.replace(tree, path=target)
    if archive is not None:
        verify_sdist(archive, pin)  # a file the user hands in is checked every time, synced or not
    if is_synced(tree, pin):
        return tree
    if archive is None:
        archive = dirs.downloads / pin.sdist_name
        if archive.exists():
            try:
                verify_sdist(archive, pin)
            except UserError:
                archive.unlink()  # a corrupt cached download is fetched again
        if not archive.exists():
            with locked(dirs.downloads / ".lock"):  # gc leaves a download in progress alone
                archive = _download_sdist(pin, dirs)
            try:
                verify_sdist(archive, pin)
            except UserError:
                archive.unlink()
                raise
    with locked(dirs.sources / ".lock"):
        if is_synced(tree, pin):
            return tree
        tree.path.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=tree.path.parent, prefix=".extract-"))
        try:
            safe_extract(archive, pin.subdir, staging / "tree")
            marker = {"sha256": pin.sha256, "commit": pin.commit, "build_number": pin.build_number, "date": pin.date}
            atomic_write_text(staging / "tree" / MARKER, json.dumps(marker))
            if tree.path.exists():
                shutil.rmtree(tree.path)
            os.replace(staging / "tree", tree.path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return tree
