"""A resolved build: recipe + arch + source + toolchain, fixed once. Its hash is the prefix's identity."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from buildmgr.building.recipes import BASE_DEFINES, Recipe
from buildmgr.building.source.tree import SourceTree
from buildmgr.core.errors import UserError
from buildmgr.core.jsonshape import dump
from buildmgr.store.receipt import FixRecord, ToolchainRef
from buildmgr.tools.toolchain import Toolchain

# Every build gets an $ORIGIN-relative RPATH: binaries find their libraries next to them (build tree) or in ../lib
# (prefix), with no LD_LIBRARY_PATH. On Linux DT_RPATH rather than RUNPATH: it is searched before LD_LIBRARY_PATH, so
# another build's libllama.so on that path cannot be loaded into this one.
_RPATH = {
    "CMAKE_BUILD_WITH_INSTALL_RPATH": "ON",
    "CMAKE_INSTALL_RPATH": "$ORIGIN/../lib;$ORIGIN",
    "CMAKE_INSTALL_LIBDIR": "lib",
}
_OLD_DTAGS = {f"CMAKE_{kind}_LINKER_FLAGS": "-Wl,--disable-new-dtags" for kind in ("EXE", "SHARED", "MODULE")}
RPATH_KEYS = tuple(_RPATH) + tuple(_OLD_DTAGS)  # refused from the user on every system


def rpath_defines(system: str, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """The $ORIGIN RPATH, then `extra` entries (an added toolchain's run-time libraries)."""
    rpath = _RPATH | {"CMAKE_INSTALL_RPATH": ";".join((_RPATH["CMAKE_INSTALL_RPATH"], *extra))}
    return rpath | (_OLD_DTAGS if system == "Linux" else {})


# Bumped when how buildmgr compiles changes the binaries without changing a define (2: build trees with a src/ link
# and -ffile-prefix-map; 3: relocatable unity sources, so no path of this host is in them).
BUILD_LAYOUT = 3


def default_jobs(cores: int, available_gib: float | None, gib_per_job: float) -> int:
    """As many jobs as cores, but never more than memory allows (at least one); where the memory free is unknown
    (None), as many as cores."""
    if available_gib is None:
        return cores
    return max(1, min(cores, int(available_gib // gib_per_job)))


def parse_jobs(text: str | None, cores: int, available_gib: float | None, gib_per_job: float) -> int:
    if text is None:
        return default_jobs(cores, available_gib, gib_per_job)
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"--jobs {text!r} must be a whole number of at least 1")
    return int(text)


@dataclass(frozen=True)
class Arch:
    """GPU architectures chosen with --sm / --gfx: CMake defines plus a label for the build id."""

    defines: tuple[tuple[str, str], ...] = ()
    label: str = ""


@dataclass(frozen=True)
class BuildPlan:
    recipe: Recipe
    source: SourceTree
    toolchain: Toolchain
    defines: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]
    jobs: int
    digest: str
    arch: Arch = Arch()
    backend_versions: dict[str, str] = field(default_factory=dict)
    host_defines: dict[str, str] = field(default_factory=dict)  # tool paths on this host; not identity
    remote_cache: str | None = None  # ccache remote storage URL, checked when a build starts; not identity
    toolchains: tuple[ToolchainRef, ...] = ()  # added with `buildmgr toolchain add`: identity
    toolchain_environ: dict[str, str] = field(default_factory=dict)  # their variables (paths): not identity
    runpath: tuple[str, ...] = ()  # RPATH entries for their run-time libraries (follow from `toolchains`)
    left_out: tuple[str, ...] = ()  # targets a known fault's fix leaves out: identity
    fixes: tuple[FixRecord, ...] = ()  # known faults left out (their defines and `left_out` are the identity)

    @property
    def build_id(self) -> str:
        middle = f"-{self.arch.label}" if self.arch.label else ""
        return f"{self.recipe.name}{middle}-{self.digest[:8]}"

    def prefix(self, builds_dir: Path) -> Path:
        return builds_dir / self.source.version_label / self.build_id


def make_plan(
    recipe: Recipe,
    source: SourceTree,
    toolchain: Toolchain,
    jobs: int,
    *,
    arch: Arch = Arch(),
    backend_versions: dict[str, str] | None = None,
    host_defines: dict[str, str] | None = None,
    toolchains: tuple[ToolchainRef, ...] = (),
    left_out: tuple[str, ...] = (),
) -> BuildPlan:
    """The plan and its build id: the identity is the source, every define, the targets, the toolchain and the
    backends' versions, and, where there are any, the added toolchains and the targets a fix leaves out."""
    defines = {**BASE_DEFINES, **dict(recipe.defines), **dict(arch.defines), **source.cmake_defines()}
    resolved = tuple(sorted(defines.items()))
    versions = dict(sorted((backend_versions or {}).items()))
    identity = {
        "layout": BUILD_LAYOUT,
        "source": source.fingerprint,
        "defines": resolved,
        "targets": recipe.targets,
        "toolchain": toolchain.identity() | versions,
    }
    if toolchains:  # only then, so that every other build keeps its id
        identity["added_toolchains"] = [dump(ref) for ref in toolchains]
    if left_out:
        identity["left_out"] = list(left_out)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return BuildPlan(
        recipe,
        source,
        toolchain,
        resolved,
        recipe.targets,
        jobs,
        digest,
        arch,
        versions,
        dict(host_defines or {}),
        toolchains=toolchains,
        left_out=left_out,
    )
