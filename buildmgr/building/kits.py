"""Toolchains added with `buildmgr toolchain add` (each backend's `Backend.kits` says what): their packages fetched by
`kit_sources` (the user's pip, this Python's wheels or a private apt), laid out by their backend package, published on
the store's toolchain shelf like a build (staging, then one rename or swap, with a receipt of every package and file),
checked against that receipt before use, and removed only when no installed build needs them."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import __version__, store
from buildmgr.building import kit_sources
from buildmgr.building.kit_sources import KitRequest, all_kits, kit_named
from buildmgr.core.config import Dirs, ensure_writable
from buildmgr.core.errors import UserError
from buildmgr.core.fsutil import locked, sha256_file
from buildmgr.core.memo import Memo, settled, stamp
from buildmgr.store.receipt import ToolchainReceipt, ToolchainRef
from buildmgr.tools.kit_spec import AptSource, Kit, PipSource

if TYPE_CHECKING:
    from buildmgr.core.progress import Reporter

RECEIPT = store.TOOLCHAIN_RECEIPT


# --- what is there --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Added:
    root: Path
    receipt: ToolchainReceipt

    @property
    def id(self) -> str:
        return self.receipt.id

    @property
    def kit(self) -> Kit:
        return kit_named(self.receipt.name)


def shelf(dirs: Dirs) -> store.Shelf[ToolchainReceipt]:
    """Where added toolchains are published: the store's toolchain shelf, which lists one this buildmgr does not
    know as unreadable."""

    def known(receipt: ToolchainReceipt) -> str | None:
        return None if receipt.name in {kit.name for kit in all_kits()} else "a toolchain this buildmgr does not know"

    return store.toolchains_shelf(dirs, known)


def scan(dirs: Dirs) -> tuple[list[Added], list[store.Unreadable]]:
    found, unreadable = shelf(dirs).scan()
    # resolved: `verify` links a user's toolchain into its scratch dir
    return [Added(root.resolve(), receipt) for root, receipt in found], unreadable


def find(dirs: Dirs, ref: str) -> Added:
    """A toolchain by its id (cuda-13.0), or by its name when exactly one of that name is added."""
    added, _ = scan(dirs)
    exact = [a for a in added if a.id == ref]
    named = [a for a in added if a.receipt.name == ref]
    if exact or len(named) == 1:
        return (exact or named)[0]
    if named:
        raise UserError(f"several {ref} toolchains are added ({', '.join(a.id for a in named)}): name one of them")
    have = ", ".join(a.id for a in added) or "none"
    names = [k.name for k in all_kits() if ref == k.name or ref.startswith(f"{k.name}-")]
    name = max(names, key=len, default=None)  # cuda-runtime-13.0 is cuda-runtime's, not cuda's
    offer = f"'buildmgr toolchain add {name}' adds one" if name else "'buildmgr toolchain list' shows what is added"
    raise UserError(f"no toolchain {ref!r} is added (added: {have}); {offer}")


def _walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.name != RECEIPT or Path(entry.path).parent != root:
                    yield os.path.relpath(entry.path, root), entry.stat(follow_symlinks=False)


def changed(added: Added, memo: Memo | None = None) -> str | None:
    """The first way the folder differs from its receipt (a file changed, missing or added), or None. Hashing a CUDA
    toolkit takes seconds, so the answer is remembered while every file's `memo.stamp` stays, once none of them
    changed in the last seconds (`memo.settled`)."""
    now = time.time_ns()
    stats = dict(_walk(added.root))
    listing = sorted((path, stamp(stat)) for path, stat in stats.items())

    def compute() -> str:
        present = set(stats)
        for path in sorted(present ^ set(added.receipt.files)):
            return f"{path} was {'added' if path in present else 'removed'}"
        for path, expected in sorted(added.receipt.files.items()):
            full = added.root / path
            actual = "link:" + os.readlink(full) if full.is_symlink() else sha256_file(full)
            if actual != expected:
                return f"{path} differs from what was added"
        return ""

    if memo is None:
        return compute() or None
    key = ["toolchain-files", str(added.root), listing]
    return memo.recall(key, compute, lambda s: s, str, keep=lambda _: settled(stats.values(), now)) or None


def require_intact(added: Added, memo: Memo | None = None) -> None:
    problem = changed(added, memo)
    if problem:
        raise UserError(
            f"toolchain {added.id} was changed after it was added ({problem}): "
            f"buildmgr toolchain remove {added.id} && buildmgr toolchain add {added.receipt.requested}"
        )


# --- adding one -----------------------------------------------------------------------------------------------------


def add(
    dirs: Dirs, request: KitRequest, environ: Mapping[str, str], reporter: Reporter, cc: str | None
) -> tuple[Added, bool]:
    """Fetch, lay out, hash and publish one toolchain; (it, whether it was already there). Nothing is left behind
    on failure: the staging folder goes, and the toolchain appears only by the final rename."""
    kit = request.kit
    if request.version is not None:
        there = _already(dirs, kit, request.version)
        if there is not None:  # e.g. restored from a CI cache: checked, not fetched again
            require_intact(there)
            return there, True
    ensure_writable(dirs.data, "set XDG_DATA_HOME to a writable directory")
    toolchains = shelf(dirs)
    with locked(toolchains.lock(kit.name)):
        toolchains.drop_staging(kit.name)  # left by an add that was killed: we hold its lock
        staging = toolchains.new_staging(kit.name)
        log = store.run_log(dirs, f"toolchain-{kit.name}")
        try:
            start = time.monotonic()
            if isinstance(kit.source, PipSource):
                fetched = kit_sources.installed_wheels(kit.source, request, staging, reporter)
                if not isinstance(fetched, kit_sources.FetchedPackages):
                    if fetched is not None:
                        reporter.warn(str(fetched))
                    fetched = kit_sources.pip(kit.source, request, staging, environ, reporter, log)
            else:
                fetched = kit_sources.apt(kit.source, request, staging, environ, reporter, log)
            root = staging / "toolchain"
            root.mkdir()
            with reporter.phase("lay out"):
                try:
                    version = kit.lay_out(fetched.folder, root, cc)
                except OSError as err:
                    raise _os_error(err, dirs) from None
            if request.version is not None and isinstance(kit.source, AptSource) and version != request.version:
                raise UserError(f"{request.text}: the packages have {kit.name} {version}; ask for {kit.name} alone")
            ident = f"{kit.name}-{version}"
            final = dirs.toolchains / ident
            if (final / RECEIPT).is_file():
                there = find(dirs, ident)
                return there, True
            with reporter.phase("hash", "every file, for the receipt"):
                files = store.file_hashes(root, RECEIPT)
                size = sum(stat.st_size for _, stat in _walk(root))
            receipt = ToolchainReceipt(
                ToolchainReceipt.VERSION,
                ident,
                kit.name,
                version,
                kit.backend,
                request.text,
                fetched.source,
                fetched.packages,
                __version__,
                datetime.now(UTC).isoformat(timespec="seconds"),
                round(time.monotonic() - start, 1),
                size,
                files,
            )
            try:  # over a folder without a receipt (a broken leftover), swapped in atomically
                toolchains.publish(root, final, receipt)
            except OSError as err:
                raise _os_error(err, dirs) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return Added(final, receipt), False


def _already(dirs: Dirs, kit: Kit, version: str) -> Added | None:
    added, _ = scan(dirs)
    matching = [a for a in added if a.receipt.name == kit.name and _same_release(a.receipt.version, version)]
    return matching[-1] if matching else None


def _same_release(have: str, asked: str) -> bool:
    """13.0.96 is release 13.0 and 13; a runtime toolchain of major 13 serves 13.0."""
    return have == asked or have.startswith(asked + ".") or asked.startswith(have + ".")


def _os_error(err: OSError, dirs: Dirs) -> UserError:
    if err.errno in (28, 122):  # ENOSPC, EDQUOT
        return UserError(
            f"the disk under {dirs.toolchains} is full ({err.strerror}): free some space; nothing was added"
        )
    return UserError(f"{err.filename or dirs.toolchains}: {err.strerror}; nothing was added")


# --- builds and toolchains ------------------------------------------------------------------------------------------


def overlay(environ: Mapping[str, str], chosen: tuple[Added, ...]) -> dict[str, str]:
    """The environment a build's checks and compilers see: each chosen toolchain's variables over the user's."""
    merged = dict(environ)
    for added in chosen:
        merged |= added.kit.environ(added.root)
    return merged


def _runtime_folders(ref: ToolchainRef) -> list[tuple[str, str]]:
    """(toolchain id, its folder of run-time libraries) that a build made with this toolchain searches: the toolchain
    itself, and its runtime-only twin, by major like the libraries' sonames (`toolchain add cuda-runtime==VERSION`
    adds it on a host without the toolchain)."""
    kit = kit_named(ref.name)
    if not kit.runpath:
        return []
    folders = [(ref.id, kit.runpath)]
    if kit.runtime:
        folders.append((f"{kit.runtime}-{ref.version.split('.')[0]}", kit_named(kit.runtime).runpath))
    return folders


def runpath(dirs: Dirs, chosen: tuple[Added, ...]) -> tuple[str, ...]:
    """RPATH entries for `_runtime_folders`, relative to $ORIGIN from a prefix's bin/ and lib/ (prefixes sit at
    <data>/builds/LABEL/ID, so no path of this host goes into the binaries)."""
    up = os.path.relpath(dirs.toolchains, dirs.builds / "label" / "id" / "bin")
    return tuple(
        f"$ORIGIN/{up}/{ident}/{folder}" for added in chosen for ident, folder in _runtime_folders(added.receipt.ref())
    )


def runtime_dirs(dirs: Dirs, refs: tuple[ToolchainRef, ...]) -> list[Path]:
    """The folders a build made with these toolchains searches for libraries on this host (see `runpath`)."""
    return [dirs.toolchains / ident / folder for ref in refs for ident, folder in _runtime_folders(ref)]


def runtime_offer(refs: tuple[ToolchainRef, ...], library: str) -> str | None:
    """`buildmgr toolchain add …` that provides a library a build made with these toolchains needs, if one does."""
    for ref in refs:
        kit = kit_named(ref.name)
        twin = kit_named(kit.runtime) if kit.runtime else kit
        if any(library.startswith(stem) for stem in twin.libraries):
            return f"buildmgr toolchain add {twin.name}=={ref.version}"
    return None


def chosen_for_build(dirs: Dirs, given: tuple[str, ...], memo: Memo) -> tuple[Added, ...]:
    """--toolchain NAME …: each added, intact, and a build toolchain (not run-time libraries alone)."""
    chosen: list[Added] = []
    for ref in given:
        added = find(dirs, ref)
        if not added.kit.builds:
            raise UserError(f"--toolchain {ref}: {added.id} holds run-time libraries only; add a build toolchain "
                            f"with buildmgr toolchain add {added.kit.backend.lower()}")  # fmt: skip
        require_intact(added, memo)
        chosen.append(added)
    return tuple(chosen)


def fitting(dirs: Dirs, backend: str) -> list[Added]:
    """The added build toolchains for one backend."""
    added, _ = scan(dirs)
    return [a for a in added if a.receipt.backend == backend and a.kit.builds]


def needed_by(dirs: Dirs, ident: str) -> list[str]:
    """The installed builds that were made with a toolchain, or find their run-time libraries in it."""
    return [
        build.id
        for build in store.installed(dirs)
        if any(ident == ref.id or ident in dict(_runtime_folders(ref)) for ref in build.receipt.toolchains)
    ]


def remove(dirs: Dirs, ident: str) -> Added:
    added = find(dirs, ident)
    toolchains = shelf(dirs)
    with locked(toolchains.lock(added.receipt.name)):
        users = needed_by(dirs, added.id)
        if users:
            raise UserError(
                f"toolchain {added.id} is needed by {len(users)} installed build(s) ({', '.join(users)}): "
                "buildmgr remove them first"
            )
        toolchains.discard(added.root)
    return added
