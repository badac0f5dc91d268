"""The one store of published things: builds (prefixes with their receipts) and toolchains (`toolchain add`), each a
`Shelf` of entries that carry a typed receipt. One way to publish (a complete staging folder, its receipt written
atomically and everything synced, then one rename, or an atomic swap over the old one), to list, to remove (one
rename out of sight, the files after) and to collect what interrupted runs left. A receipt is the single source of
truth about its entry."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Generic, TypeVar

from buildmgr.core.config import Dirs
from buildmgr.core.errors import UserError
from buildmgr.core.fsutil import atomic_write_text, fsync_tree, idle_lock, locked, remove_if_idle, sha256_file
from buildmgr.core.jsonshape import Record, ShapeError
from buildmgr.store.receipt import FILE_NAME as RECEIPT
from buildmgr.store.receipt import Receipt, ToolchainReceipt

R = TypeVar("R", bound=Record)
TOOLCHAIN_RECEIPT = "buildmgr-toolchain.json"


@dataclass(frozen=True)
class Unreadable:
    """An entry whose receipt this buildmgr cannot read: never used, and its listing names it."""

    prefix: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.prefix}: its receipt cannot be read ({self.reason})"


@dataclass(frozen=True)
class Shelf(Generic[R]):
    """One kind of published thing: where its entries sit (`pattern` under `root`), the receipt each one carries,
    where its staging folders go and the lock that guards each key (a build id, a toolchain's name)."""

    root: Path
    pattern: str  # entries under root: "*/*" (LABEL/ID) for builds, "*" for toolchains
    receipt: str  # the receipt's file name in each entry
    record: type[R]
    locks: Path
    listed_without_receipt: bool = False  # an entry folder with no receipt file: unreadable (else not an entry)
    known: Callable[[R], str | None] = lambda record: None  # why a readable receipt is still not usable here
    what: str = "build"  # how messages name an entry
    lenient_removal: bool = False  # files a removal cannot delete are left to gc, not an error

    @property
    def staging(self) -> Path:
        return self.root / ".staging"

    def lock(self, key: str) -> Path:
        return self.locks / f"{key}.lock"

    def load(self, entry: Path) -> R | Unreadable | None:
        """The entry's receipt; Unreadable, with why, where this buildmgr cannot read it; None where it has none
        (and such a folder is not an entry of this shelf)."""
        found = _load(entry, self.receipt, self.record)
        if found is None and self.listed_without_receipt:
            return Unreadable(entry, f"no readable {self.receipt} (No such file or directory)")
        why = self.known(found) if isinstance(found, self.record) else None
        return Unreadable(entry, why) if why else found

    def scan(self) -> tuple[list[tuple[Path, R]], list[Unreadable]]:
        """Every published entry (by path) and the ones whose receipts cannot be read; half-removed or replaced ones
        (hidden names) are neither."""
        found: list[tuple[Path, R]] = []
        unreadable: list[Unreadable] = []
        for entry in sorted(self.root.glob(self.pattern)) if self.root.is_dir() else ():
            if any(part.startswith(".") for part in entry.relative_to(self.root).parts) or not entry.is_dir():
                continue
            loaded = self.load(entry)
            if isinstance(loaded, Unreadable):
                unreadable.append(loaded)
            elif loaded is not None:
                found.append((entry, loaded))
        return found, unreadable

    def new_staging(self, key: str) -> Path:
        """A fresh staging folder for a caller that holds `key`'s lock."""
        path = self.staging / f"{key}.{os.getpid()}.{os.urandom(4).hex()}"
        path.mkdir(parents=True)
        return path

    def drop_staging(self, key: str) -> None:
        """Staging folders of this key; only for a caller that holds its lock (so none of them is live)."""
        for path in self.staging.glob(f"{key}.*") if self.staging.is_dir() else ():
            shutil.rmtree(path, ignore_errors=True)

    def publish(self, staging: Path, entry: Path, receipt: R) -> None:
        _publish(staging, entry, self.receipt, receipt, self.what)

    def discard(self, entry: Path) -> None:
        """The entry disappears at once (one rename to a hidden name beside it), its files after (what cannot be
        deleted then is gc's, where the shelf says so)."""
        doomed = entry.with_name(f".removing-{entry.name}-{os.urandom(4).hex()}")
        os.rename(entry, doomed)
        shutil.rmtree(doomed, ignore_errors=self.lenient_removal)

    def collect(self, removed: list[Leftover], dry: bool = False) -> None:
        """What interrupted runs left: staging folders whose key's lock is free, and entries half removed or
        replaced (hidden names)."""
        for path in sorted(self.staging.iterdir()) if self.staging.is_dir() else ():
            why = f"staging of an interrupted {self.what}"
            _collect_idle([path], self.lock(path.name.split(".", 1)[0]), why, removed, dry)
        depth = self.pattern.count("/")
        hidden = self.root.glob("/".join(["*"] * depth + [".*"])) if self.root.is_dir() else ()
        for leftover in sorted(hidden):
            if leftover.name.startswith((".old-", ".removing-")) and leftover.is_dir():
                if not dry:
                    shutil.rmtree(leftover, ignore_errors=True)
                removed.append(Leftover(leftover, f"a {self.what} half removed or replaced"))


def _load(entry: Path, name: str, record: type[R]) -> R | Unreadable | None:
    try:
        return record.from_text((entry / name).read_bytes())
    except FileNotFoundError:
        return None
    except OSError as err:
        return Unreadable(entry, str(err))
    except ShapeError as err:
        return Unreadable(entry, str(err))


def _publish(staging: Path, entry: Path, name: str, receipt: Record, what: str = "build") -> None:
    """Write the receipt, then make the complete staging folder the entry in one step. An older entry is swapped
    out atomically (renameat2 RENAME_EXCHANGE), so there is no moment without a whole one, then deleted."""
    atomic_write_text(staging / name, receipt.to_text())
    fsync_tree(staging)
    entry.parent.mkdir(parents=True, exist_ok=True)
    if entry.exists():
        exchange(staging, entry, what)
        shutil.rmtree(staging, ignore_errors=True)  # now the old entry
    else:
        os.rename(staging, entry)


def builds_shelf(dirs: Dirs) -> Shelf[Receipt]:
    return Shelf(dirs.builds, "*/*", RECEIPT, Receipt, dirs.data / "locks")


def toolchains_shelf(dirs: Dirs, known: Callable[[ToolchainReceipt], str | None]) -> Shelf[ToolchainReceipt]:
    return Shelf(
        dirs.toolchains,
        "*",
        TOOLCHAIN_RECEIPT,
        ToolchainReceipt,
        dirs.toolchains / ".locks",
        listed_without_receipt=True,
        known=known,
        what="toolchain",
        lenient_removal=True,
    )


# --- builds -----------------------------------------------------------------------------------------------------


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
    return builds_shelf(dirs).lock(build_id)


def load_receipt(prefix: Path) -> Receipt | Unreadable | None:
    """The prefix's receipt; Unreadable, with why, where this buildmgr cannot read the one there; None where there
    is none."""
    return _load(prefix, RECEIPT, Receipt)


def read_receipt(prefix: Path) -> Receipt | None:
    """The prefix's receipt, or None where there is none or it is not a receipt this buildmgr reads."""
    found = load_receipt(prefix)
    return found if isinstance(found, Receipt) else None


def scan(dirs: Dirs) -> tuple[list[Build], list[Unreadable]]:
    """Every published build, oldest first, and the prefixes whose receipts cannot be read."""
    found, unreadable = builds_shelf(dirs).scan()
    builds = [Build(receipt.id, prefix, receipt) for prefix, receipt in found]
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
    return builds_shelf(dirs).new_staging(build_id)


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
    builds_shelf(dirs).drop_staging(build_id)


def write_receipt(staging: Path, receipt: Receipt) -> None:
    atomic_write_text(staging / RECEIPT, receipt.to_text())


def publish(staging: Path, prefix: Path, receipt: Receipt) -> None:
    """A staged build becomes its prefix (see `_publish`)."""
    _publish(staging, prefix, RECEIPT, receipt)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path, what: str = "build") -> None:
    """Swap two paths atomically (Linux renameat2); a file system without it is an error, never a gap."""
    import ctypes  # here, not on every no-op's import path (3 ms)

    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2"):
        raise OSError(errno.ENOSYS, f"renameat2 is not available to swap the {what} in place", str(b))
    if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot swap in the new {what} ({os.strerror(code)})", str(b))


def remove(dirs: Dirs, build: Build) -> None:
    with locked(build_lock(dirs, build.id)):
        builds_shelf(dirs).discard(build.prefix)
        shutil.rmtree(dirs.build_trees / build.id, ignore_errors=True)


@dataclass(frozen=True)
class Leftover:
    """What gc removes (or, dry, would), and why."""

    path: Path
    why: str


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _collect_artifact_downloads(dirs: Dirs, removed: list[Leftover], dry: bool) -> None:
    """`install --from` deletes an archive once it is installed, or failed verification or its proof: a folder
    still under `<cache>/downloads/<sha256>/` is what an interrupted install left (a partial download kept to resume
    included). One whose lock a download holds stays."""
    why = "an artifact download no install is using (install deletes each once it is done with it)"
    found = dirs.downloads.iterdir() if dirs.downloads.is_dir() else iter(())
    for folder in sorted(p for p in found if p.is_dir() and _SHA256.fullmatch(p.name)):
        if dry:
            removed += [Leftover(folder, why)] if idle_lock(folder / ".lock") else []
            continue
        with locked(folder / ".lock", wait=False) as idle:
            if idle:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(Leftover(folder, why))


def _collect_idle(paths: list[Path], lock: Path, why: str, removed: list[Leftover], dry: bool) -> None:
    """Delete these leftovers unless the lock that their writer holds is busy (locks work across containers
    that share the data dir; process ids do not)."""
    if not paths:
        return
    if dry:
        removed += [Leftover(path, why) for path in paths] if idle_lock(lock) else []
        return
    existed = lock.exists()
    with locked(lock, wait=False) as idle:
        if idle:
            for path in paths:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(Leftover(path, why))
    if not existed:
        remove_if_idle(lock)  # made by this check: not a leftover of anyone's


def gc(dirs: Dirs, shelves: tuple[Shelf[ToolchainReceipt], ...] = (), dry: bool = False) -> list[Leftover]:
    """Remove what interrupted runs left on every shelf (staging folders, half-done renames), extractions, downloads
    and clones, orphan build trees, lock files of builds not running, and shaders no build used for 30 days; `dry`:
    only say what."""
    removed: list[Leftover] = []
    builds_shelf(dirs).collect(removed, dry)
    for shelf in shelves:
        shelf.collect(removed, dry)
    interrupted = "left by an interrupted"
    _collect_idle(
        sorted(dirs.sources.glob(".extract-*")), dirs.sources / ".lock", f"{interrupted} source sync", removed, dry
    )
    _collect_idle(
        sorted(dirs.downloads.glob(".pip-*")), dirs.downloads / ".lock", f"{interrupted} download", removed, dry
    )
    _collect_idle(sorted(dirs.git.glob(".*.tmp")), dirs.git / ".lock", f"{interrupted} clone", removed, dry)
    _collect_artifact_downloads(dirs, removed, dry)
    if dirs.build_trees.is_dir():
        alive = {b.id for b in installed(dirs)}
        for tree in dirs.build_trees.iterdir():
            if tree.name in alive:
                continue
            why = f"build tree of {tree.name}, which is not installed (failed or removed)"
            if dry:
                removed += [Leftover(tree, why)] if idle_lock(build_lock(dirs, tree.name)) else []
                continue
            lock = build_lock(dirs, tree.name)
            existed = lock.exists()
            with locked(lock, wait=False) as idle:
                if idle:  # a busy lock is a build in progress: its tree stays
                    shutil.rmtree(tree, ignore_errors=True)
                    removed.append(Leftover(tree, why))
            if not existed:
                remove_if_idle(lock)  # made by this check: not a leftover of anyone's
    for lock in sorted((dirs.data / "locks").glob("*.lock")):  # one per build id ever built, else kept forever
        if idle_lock(lock) if dry else remove_if_idle(lock):
            removed.append(Leftover(lock, "lock file of a build not running"))
    from buildmgr import backends  # not on a no-op's import path

    return removed + [
        Leftover(path, "shader no build used for 30 days")
        for cache in backends.shader_caches()
        for path in cache.prune(dirs.shader_cache, time.time(), dry)
    ]
