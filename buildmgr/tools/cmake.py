"""The one adapter over scikit-build-core: finding cmake/ninja and reading CMake's File API reply."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# scikit-build-core is imported where it is used: a no-op build never needs it (about 50 ms of start-up).
if TYPE_CHECKING:
    from collections.abc import Iterable

    from scikit_build_core import program_search as skb
    from scikit_build_core.file_api.model.codemodel import Configuration


@dataclass(frozen=True)
class Program:
    path: Path
    version: str


def _best(programs: Iterable[skb.Program], minimum: str) -> Program | None:
    from packaging.specifiers import SpecifierSet
    from scikit_build_core.program_search import best_program

    found = best_program(programs, version=SpecifierSet(f">={minimum}"))
    return Program(found.path, str(found.version)) if found and found.version else None


def find_cmake(minimum: str) -> Program | None:
    """The first cmake (PyPI's first, then PATH) at least `minimum`."""
    from scikit_build_core.program_search import get_cmake_programs

    return _best(get_cmake_programs(), minimum)


def find_ninja(minimum: str) -> Program | None:
    from scikit_build_core.program_search import get_ninja_programs

    return _best(get_ninja_programs(), minimum)


def _wheel_module(package: str) -> Path | None:
    """The cmake or ninja wheel's `__init__.py`, found without importing it (cmake's import alone costs 30 ms):
    installing, upgrading or removing the wheel rewrites it, so its stamp stands for the wheel's binary."""
    spec = importlib.util.find_spec(package)
    return Path(spec.origin) if spec is not None and spec.origin else None


def candidate_paths() -> list[Path]:
    """What stands for every cmake and ninja find_cmake/find_ninja may pick: if none changed, neither did the result."""
    candidates = [Path(shutil.which(name) or "") for name in ("cmake3", "cmake", "ninja-build", "ninja")]
    for package in ("cmake", "ninja"):
        module = _wheel_module(package)
        if module is not None:
            candidates.append(module)
    return [path for path in candidates if path.name]


def request_reply(build_dir: Path) -> None:
    """Ask the next configure to write codemodel and cache replies."""
    from scikit_build_core.file_api.query import stateless_query

    stateless_query(build_dir)


@dataclass(frozen=True)
class Reply:
    configuration: Configuration
    cache: dict[str, str]
    cache_types: dict[str, str]  # UNINITIALIZED: set with -D but never declared by the project


def read_reply(build_dir: Path) -> Reply:
    from scikit_build_core.file_api.reply import load_reply_dir

    index = load_reply_dir(build_dir / ".cmake" / "api" / "v1" / "reply")
    codemodel, cache = index.reply.codemodel_v2, index.reply.cache_v2
    if codemodel is None or cache is None:
        raise FileNotFoundError(f"no CMake File API reply in {build_dir}")
    return Reply(
        codemodel.configurations[0],
        {entry.name: entry.value for entry in cache.entries},
        {entry.name: entry.type for entry in cache.entries},
    )
