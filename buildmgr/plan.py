"""A resolved build: recipe + source + toolchain, fixed once. Its hash is the prefix's identity."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from buildmgr.errors import UserError
from buildmgr.recipes import BASE_DEFINES, Recipe
from buildmgr.source import SourceTree
from buildmgr.toolchain import Toolchain

# Each compile job of llama.cpp's larger C++ files can take about 2 GiB.
MEMORY_PER_JOB_GIB = 2.0


def default_jobs(cores: int, available_gib: float) -> int:
    """As many jobs as cores, but never more than memory allows (at least one)."""
    return max(1, min(cores, int(available_gib // MEMORY_PER_JOB_GIB)))


def parse_jobs(text: str | None, cores: int, available_gib: float) -> int:
    if text is None:
        return default_jobs(cores, available_gib)
    if not text.isdigit() or int(text) < 1:
        raise UserError(f"--jobs {text!r} must be a whole number of at least 1")
    return int(text)


@dataclass(frozen=True)
class BuildPlan:
    recipe: Recipe
    source: SourceTree
    toolchain: Toolchain
    defines: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]
    jobs: int
    digest: str

    @property
    def build_id(self) -> str:
        return f"{self.recipe.name}-{self.digest[:8]}"

    def prefix(self, builds_dir: Path) -> Path:
        return builds_dir / self.source.version_label / self.build_id


def make_plan(recipe: Recipe, source: SourceTree, toolchain: Toolchain, jobs: int) -> BuildPlan:
    defines = {**BASE_DEFINES, **dict(recipe.defines), **source.cmake_defines()}
    resolved = tuple(sorted(defines.items()))
    identity = {
        "source": source.fingerprint,
        "defines": resolved,
        "targets": recipe.targets,
        "toolchain": toolchain.identity(),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return BuildPlan(recipe, source, toolchain, resolved, recipe.targets, jobs, digest)
