"""The one adapter over scikit-build-core: finding cmake/ninja and reading CMake's File API reply."""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from scikit_build_core.file_api.model.codemodel import Configuration
from scikit_build_core.file_api.query import stateless_query
from scikit_build_core.file_api.reply import load_reply_dir
from scikit_build_core.program_search import best_program, get_cmake_programs, get_ninja_programs


@dataclass(frozen=True)
class Program:
    path: Path
    version: str


def _best(programs, minimum: str) -> Program | None:
    found = best_program(programs, version=SpecifierSet(f">={minimum}"))
    return Program(found.path, str(found.version)) if found and found.version else None


def find_cmake(minimum: str) -> Program | None:
    """The first cmake (PyPI's first, then PATH) at least `minimum`."""
    return _best(get_cmake_programs(), minimum)


def find_ninja(minimum: str) -> Program | None:
    return _best(get_ninja_programs(), minimum)


def candidate_paths() -> list[Path]:
    """Every cmake and ninja that find_cmake/find_ninja may pick: if none changed, neither did the result."""
    candidates = [Path(shutil.which(name) or "") for name in ("cmake3", "cmake", "ninja-build", "ninja")]
    with contextlib.suppress(ImportError):
        from cmake import CMAKE_BIN_DIR

        candidates.append(Path(CMAKE_BIN_DIR) / "cmake")
    with contextlib.suppress(ImportError):
        from ninja import BIN_DIR

        candidates.append(Path(BIN_DIR) / "ninja")
    return [path for path in candidates if path.name]


def request_reply(build_dir: Path) -> None:
    """Ask the next configure to write codemodel and cache replies."""
    stateless_query(build_dir)


@dataclass(frozen=True)
class Reply:
    configuration: Configuration
    cache: dict[str, str]
    cache_types: dict[str, str]  # UNINITIALIZED: set with -D but never declared by the project


def read_reply(build_dir: Path) -> Reply:
    index = load_reply_dir(build_dir / ".cmake" / "api" / "v1" / "reply")
    codemodel, cache = index.reply.codemodel_v2, index.reply.cache_v2
    if codemodel is None or cache is None:
        raise FileNotFoundError(f"no CMake File API reply in {build_dir}")
    return Reply(
        codemodel.configurations[0],
        {entry.name: entry.value for entry in cache.entries},
        {entry.name: entry.type for entry in cache.entries},
    )
