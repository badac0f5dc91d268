"""Prefixes and their receipts. A receipt is the single source of truth about a build."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from buildmgr.config import Dirs
from buildmgr.errors import UserError
from buildmgr.fsutil import atomic_write_text, fsync_tree, locked, remove_if_idle, sha256_file
from buildmgr.jsonshape import ShapeError
from buildmgr.receipt import FILE_NAME as RECEIPT
from buildmgr.receipt import Receipt


@dataclass(frozen=True)
class Build:
    id: str
    prefix: Path
    receipt: Receipt

    @property
    def recipe(self) -> str:
        return self.receipt.recipe.name

    @property
    def finished(self) -> str:
        return self.receipt.finished

    def tool(self, name: str) -> Path:
        """A tool of this build: a plain name, resolved inside its bin/ (no paths, no '..')."""
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise UserError(f"tool {name!r} must be the name of a program in the build's bin/, e.g. llama-cli")
        return self.prefix / "bin" / name

    def installed_tool(self, name: str) -> Path:
        """A tool this build has; UserError naming the ones it has otherwise."""
        path = self.tool(name)
        if not path.is_file():
            tools = sorted(p.name for p in (self.prefix / "bin").iterdir() if p.is_file())
            raise UserError(f"build {self.id} has no {name}; it has: {', '.join(tools)}")
        return path


def build_lock(dirs: Dirs, build_id: str) -> Path:
    return dirs.data / "locks" / f"{build_id}.lock"


@dataclass(frozen=True)
class Unreadable:
    """A prefix with a receipt this buildmgr cannot read: never used as a build, and `list` names it."""

    prefix: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.prefix}: its receipt cannot be read ({self.reason})"


def load_receipt(prefix: Path) -> Receipt | Unreadable | None:
    """The prefix's receipt; Unreadable, with why, where this buildmgr cannot read the one there; None where there
    is none."""
    try:
        return Receipt.from_text((prefix / RECEIPT).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ShapeError) as err:
        return Unreadable(prefix, str(err))


def read_receipt(prefix: Path) -> Receipt | None:
    """The prefix's receipt, or None where there is none or it is not a receipt this buildmgr reads."""
    found = load_receipt(prefix)
    return found if isinstance(found, Receipt) else None


def scan(dirs: Dirs) -> tuple[list[Build], list[Unreadable]]:
    """Every published build, oldest first, and the prefixes whose receipts cannot be read."""
    builds, unreadable = [], []
    for receipt_path in sorted(dirs.builds.glob(f"*/*/{RECEIPT}")):
        prefix = receipt_path.parent
        if prefix.name.startswith(".") or prefix.parent.name.startswith("."):  # half removed or replaced
            continue
        found = load_receipt(prefix)
        if isinstance(found, Receipt):
            builds.append(Build(found.id, prefix, found))
        elif found is not None:
            unreadable.append(found)
    return sorted(builds, key=lambda b: b.finished), unreadable


def installed(dirs: Dirs) -> list[Build]:
    return scan(dirs)[0]


def find(dirs: Dirs, ref: str) -> Build:
    """A build id, or a recipe name meaning that recipe's newest build."""
    builds, unreadable = scan(dirs)
    exact = [b for b in builds if b.id == ref]
    if exact:
        return exact[0]
    recipe = "+".join(sorted(set(ref.split("+"))))  # vulkan+cuda names the cuda+vulkan builds
    of_recipe = [b for b in builds if b.recipe == recipe]
    if of_recipe:
        return of_recipe[-1]
    known = ", ".join(b.id for b in builds) or "none; run 'buildmgr build' first"
    skipped = f"; and {len(unreadable)} prefix{'es' if len(unreadable) > 1 else ''} whose receipt cannot be read "
    skipped += f"('buildmgr list' names {'them' if len(unreadable) > 1 else 'it'})"
    raise UserError(f"no installed build {ref!r}; installed: {known}" + (skipped if unreadable else ""))


def file_hashes(prefix: Path, receipt: str = RECEIPT) -> dict[str, str]:
    """Every file under `prefix` but its receipt: sha256 hex, or link:<target>."""
    hashes = {}
    for path in sorted(prefix.rglob("*")):
        relative = str(path.relative_to(prefix))
        if path.is_symlink():
            hashes[relative] = "link:" + os.readlink(path)
        elif path.is_file() and path.name != receipt:
            hashes[relative] = sha256_file(path)
    return hashes


def run_log(dirs: Dirs, name: str, suffix: str = ".log") -> Path:
    """`<cache>/logs/<name>-<UTC stamp>-<pid><suffix>`: chosen under the build's lock, so one log per run."""
    dirs.logs.mkdir(parents=True, exist_ok=True)
    return dirs.logs / f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{os.getpid()}{suffix}"


def new_staging(dirs: Dirs, build_id: str) -> Path:
    path = dirs.staging / f"{build_id}.{os.getpid()}.{os.urandom(4).hex()}"
    path.mkdir(parents=True)
    return path


@contextlib.contextmanager
def staged(dirs: Dirs, build_id: str) -> Iterator[Path]:
    """A fresh staging dir for a build the caller holds the lock of; gone afterwards unless it was published."""
    path = new_staging(dirs, build_id)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)  # a published staging dir no longer exists


def drop_stale_staging(dirs: Dirs, build_id: str) -> None:
    """Staging dirs of this build id; only for a caller that holds the build's lock (so none of them is live)."""
    for path in dirs.staging.glob(f"{build_id}.*") if dirs.staging.is_dir() else ():
        shutil.rmtree(path, ignore_errors=True)


def write_receipt(staging: Path, receipt: Receipt) -> None:
    atomic_write_text(staging / RECEIPT, receipt.to_text())


def publish(staging: Path, prefix: Path, receipt: Receipt) -> None:
    """Write the receipt, then make the complete staging dir the prefix in one step. An older prefix is swapped out atomically
    (renameat2 RENAME_EXCHANGE), so there is no moment without a whole build, and then deleted from staging."""
    write_receipt(staging, receipt)
    fsync_tree(staging)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    if prefix.exists():
        exchange(staging, prefix)
        shutil.rmtree(staging, ignore_errors=True)  # now the old build
    else:
        os.rename(staging, prefix)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (Linux renameat2); a file system without it is an error, never a gap."""
    import ctypes  # here, not on every no-op's import path (3 ms)

    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        raise OSError(errno.ENOSYS, "renameat2 is not available to swap the build in place", str(b))
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot swap in the new build ({os.strerror(code)})", str(b))


def remove(dirs: Dirs, build: Build) -> None:
    with locked(build_lock(dirs, build.id)):
        doomed = build.prefix.with_name(f".removing-{build.prefix.name}-{os.urandom(4).hex()}")
        os.rename(build.prefix, doomed)  # the build disappears at once, the files after
        shutil.rmtree(doomed)
        shutil.rmtree(dirs.build_trees / build.id, ignore_errors=True)


def _collect_idle(paths: list[Path], lock: Path, removed: list[Path]) -> None:
    """Delete these leftovers unless the lock that their writer holds is busy (locks work across containers
    that share the data dir; process ids do not)."""
    if not paths:
        return
    with locked(lock, wait=False) as idle:
        if idle:
            for path in paths:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)


def gc(dirs: Dirs) -> list[Path]:
    """Remove staging dirs of builds no longer running, leftovers of interrupted renames, extractions, downloads
    and clones, orphan build trees, lock files of builds not running, and shaders no build used for 30 days."""
    removed: list[Path] = []
    if dirs.staging.is_dir():
        for path in dirs.staging.iterdir():
            _collect_idle([path], build_lock(dirs, path.name.split(".", 1)[0]), removed)
    _collect_idle(sorted(dirs.sources.glob(".extract-*")), dirs.sources / ".lock", removed)
    _collect_idle(sorted(dirs.downloads.glob(".pip-*")), dirs.downloads / ".lock", removed)
    _collect_idle(sorted(dirs.git.glob(".*.tmp")), dirs.git / ".lock", removed)
    for leftover in dirs.builds.glob("*/.*"):
        if leftover.name.startswith((".old-", ".removing-")) and leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
            removed.append(leftover)
    if dirs.build_trees.is_dir():
        alive = {b.id for b in installed(dirs)}
        for tree in dirs.build_trees.iterdir():
            if tree.name in alive:
                continue
            with locked(build_lock(dirs, tree.name), wait=False) as idle:
                if idle:  # a busy lock is a build in progress: its tree stays
                    shutil.rmtree(tree, ignore_errors=True)
                    removed.append(tree)
    for lock in sorted((dirs.data / "locks").glob("*.lock")):  # one per build id ever built, else kept forever
        if remove_if_idle(lock):
            removed.append(lock)
    from buildmgr.backends import glslc_cache  # not on a no-op's import path

    return removed + glslc_cache.prune(dirs.shader_cache, time.time())
