"""Where ROCm is here (the first layout that has it), and what it has: its version, hipBLAS and rocBLAS, ROCm's
clang, and the gfx targets rocBLAS ships kernels for."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from packaging.version import InvalidVersion, Version

from buildmgr.backend_spec import Host, Report
from buildmgr.backends.hip import LAYOUTS, MIN_ROCM, NAME, PACKAGES, ROCM_FIX, TOO_OLD, Layout, gfx_key
from buildmgr.core import proc
from buildmgr.core.engines import read_file
from buildmgr.core.findings import Check


def _first(root: Path, pattern: str) -> Path:
    """The path a layout's pattern names under root: the last match of a glob (the newest version), or the plain path."""
    if not any(c in pattern for c in "*?["):
        return root / pattern
    found = sorted(root.glob(pattern), key=lambda p: [int(n) for n in re.findall(r"\d+", str(p))])
    return found[-1] if found else root / pattern


class Rocm(NamedTuple):
    """ROCm as found here, in one layout."""

    layout: Layout
    root: Path
    hipconfig: str | None
    clang: Path  # ROCm's clang: where hipconfig says it is, else where the layout keeps it

    @property
    def packages(self) -> dict[str, Path]:
        return {name: _first(self.root, self.layout.cmake_packages) / name for name in PACKAGES}

    @property
    def rocblas_kernels(self) -> Path:
        return _first(self.root, self.layout.rocblas_kernels)

    @property
    def bin(self) -> Path:
        return self.root / self.layout.bin

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files behind what inspect() finds: hipconfig, the hipBLAS/rocBLAS CMake packages, ROCm's clang and the
        folder of rocBLAS's kernels (its targets are a check)."""
        return (
            *([self.hipconfig] if self.hipconfig else []),
            *map(str, self.packages.values()),
            str(self.clang),
            str(self.rocblas_kernels),
        )


def find_rocm(environ: Mapping[str, str]) -> Rocm:
    """The first layout whose hipconfig and CMake packages are where that layout keeps them (ROCM_PATH moves every
    layout's root), else the first with hipconfig there, else the first layout, with hipconfig from PATH if there."""
    found: list[tuple[Layout, Path, str | None]] = []
    for layout in LAYOUTS:
        root = Path(environ.get("ROCM_PATH", layout.root))
        bindir = root / layout.bin
        if os.access(bindir / "hipconfig", os.X_OK):
            if _first(root, layout.cmake_packages).is_dir():
                return _rocm(layout, root, str(bindir / "hipconfig"), environ)
            found.insert(0, (layout, root, str(bindir / "hipconfig")))
        else:
            found.append((layout, root, proc.which("hipconfig", environ, str(bindir))))
    return _rocm(*found[0], environ)


def _rocm(layout: Layout, root: Path, hipconfig: str | None, environ: Mapping[str, str]) -> Rocm:
    """The ROCm found, its clang asked of hipconfig once (Debian's is the distribution's clang-NN)."""
    said = proc.run([hipconfig, "--hipclangpath"], timeout=60, env=dict(environ)).stdout.strip() if hipconfig else ""
    clang = Path(said, "clang") if said and Path(said, "clang").is_file() else _first(root, layout.clang)
    return Rocm(layout, root, hipconfig, clang)


def locate(host: Host) -> Rocm:
    return find_rocm(host.environ)


def parse_rocm_version(text: str) -> Version | None:
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    try:
        return Version(match.group(1)) if match else None
    except InvalidVersion:
        return None


def inspect(host: Host, found: Rocm, deep: bool) -> Report:
    if found.hipconfig is None:
        return Report((Check(NAME, "ROCm (hipconfig)", False, f"not found in {found.bin} or PATH", ROCM_FIX),))
    version = parse_rocm_version(proc.run([found.hipconfig, "--version"], timeout=60, env=dict(host.environ)).output)
    recent = bool(version and version >= Version(MIN_ROCM))
    fix = ROCM_FIX if recent else f"llama.cpp at the pin stops with '{TOO_OLD}': {ROCM_FIX}"
    checks = [Check(NAME, "ROCm", recent, f"{version} at {found.root}", fix)]
    versions = {"rocm": str(version)}
    for package, config in found.packages.items():
        said = package_version(config, package)
        versions |= {package: said} if said else {}
        checks.append(
            Check(
                NAME,
                package,
                config.is_dir(),
                (f"{said} at {config}" if said else str(config)) if config.is_dir() else "not found",
                f"install {package}-dev from AMD's ROCm repository, or lib{package}-dev from your distribution",
            )
        )
    clang = found.clang
    checks.append(
        Check(NAME, "ROCm's clang", clang.is_file(), str(clang) if clang.is_file() else "not found", ROCM_FIX)
    )
    kernels = rocblas_targets(found)
    checks.append(
        Check(
            NAME,
            "rocBLAS kernels",
            bool(kernels),
            f"{', '.join(sorted(kernels, key=gfx_key))} in {found.rocblas_kernels}" if kernels else "none found",
            "install librocblas (rocblas from AMD's repository): llama.cpp's matrix products need its kernels",
        )
    )
    defines = {"CMAKE_HIP_COMPILER": str(clang)} if clang.is_file() else {}
    return Report(tuple(checks), defines, versions)


def package_version(config: Path, name: str) -> str | None:
    """A CMake package's version, from its `<name>-config-version.cmake`."""
    match = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', read_file(config / f"{name}-config-version.cmake") or "")
    return match.group(1) if match else None


def rocblas_targets(rocm: Rocm) -> set[str]:
    """The gfx targets rocBLAS ships kernels for here: its Tensile library files are named by target
    (`TensileLibrary_lazy_gfx1100.dat`, which rocBLAS loads for a gfx1100 GPU)."""
    library = rocm.rocblas_kernels
    names = (p.name for p in library.iterdir()) if library.is_dir() else ()
    return {m.group(1) for name in names if (m := re.match(r"TensileLibrary.*[-_](gfx[0-9a-f]{3,4})[-_.]", name))}
