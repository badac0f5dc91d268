"""What a prefix needs from the host that runs it, read from its ELF files (pyelftools), and whether a host has it.

Recorded in every receipt as `runtime`: the glibc and libstdc++ floors (the highest GLIBC_x.y / GLIBCXX_x.y.z symbol
versions any file needs), the NEEDED libraries the prefix does not ship, and the GPU code compiled in, per backend
(each backend module names the ELF section it reads and how). These are the facts behind "GLIBC_2.38 not found" and
"no kernel image is available", checked before an artifact is installed on another machine.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from buildmgr import backends
from buildmgr.core import proc

_ELF_MAGIC = b"\x7fELF"
_FLOORS = {"glibc": "GLIBC_", "libstdcxx": "GLIBCXX_"}


@dataclass(frozen=True)
class ElfFile:
    needed: tuple[str, ...]
    soname: str | None
    version_needs: tuple[str, ...]  # e.g. GLIBC_2.34, GLIBCXX_3.4.30
    device_code: dict[str, frozenset[str]] = field(default_factory=dict)  # backend → GPU code found


def read_elf(path: Path) -> ElfFile | None:
    """The facts of one ELF file, or None if it is not one."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    readers = {code.section: (name, code) for name, code in backends.device_codes()}
    with open(path, "rb") as handle:
        if handle.read(4) != _ELF_MAGIC:
            return None
        handle.seek(0)
        try:
            elf = ELFFile(handle)
            needed: list[str] = []
            soname = None
            versions: list[str] = []
            code: dict[str, set[str]] = {}
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    for tag in section.iter_tags():
                        if tag.entry.d_tag == "DT_NEEDED":
                            needed.append(tag.needed)  # type: ignore[attr-defined]  # pyelftools sets it per tag
                        elif tag.entry.d_tag == "DT_SONAME":
                            soname = tag.soname  # type: ignore[attr-defined]
                elif isinstance(section, GNUVerNeedSection):
                    versions += [aux.name for _, auxes in section.iter_versions() for aux in auxes]
                elif section.name in readers:
                    backend, reader = readers[section.name]
                    code.setdefault(backend, set()).update(reader.read(section.data()))
        except (ELFError, struct.error, ValueError) as err:
            raise ValueError(f"{path}: unreadable ELF file ({err})") from None
    return ElfFile(tuple(needed), soname, tuple(versions), {k: frozenset(v) for k, v in code.items() if v})


def _version_of(symbol_version: str, prefix: str) -> Version | None:
    if not symbol_version.startswith(prefix):
        return None
    try:
        return Version(symbol_version.removeprefix(prefix))
    except InvalidVersion:
        return None


def highest(symbol_versions: list[str] | tuple[str, ...], prefix: str) -> Version | None:
    found = [v for v in (_version_of(s, prefix) for s in symbol_versions) if v is not None]
    return max(found, default=None)


def scan_prefix(prefix: Path) -> dict[str, object]:
    """The receipt's `runtime`: what every ELF file of the prefix needs from the host, and its GPU code."""
    files: dict[str, ElfFile] = {}
    for path in sorted(prefix.rglob("*")):
        if path.is_file() and not path.is_symlink():
            facts = read_elf(path)
            if facts is not None:
                files[str(path.relative_to(prefix))] = facts
    shipped = {Path(name).name for name in files} | {f.soname for f in files.values() if f.soname}
    shipped |= {p.name for p in prefix.rglob("*") if p.is_symlink()}
    floors: dict[str, object] = {}
    for key, symbol_prefix in _FLOORS.items():
        by_file = {name: highest(f.version_needs, symbol_prefix) for name, f in files.items()}
        top = max((v for v in by_file.values() if v is not None), default=None)
        floors[key] = str(top) if top else None
        floors[f"{key}_file"] = next((n for n, v in by_file.items() if v == top), None) if top else None
    external: dict[str, list[str]] = {}
    for name, facts in files.items():
        for library in facts.needed:
            if library not in shipped:
                external.setdefault(library, []).append(name)
    return {
        "elf_files": len(files),
        **floors,
        "needed": dict(sorted(external.items())),
        "device_code": device_code(files.values()),
    }


def device_code(files: Iterable[ElfFile]) -> dict[str, list[str]]:
    """Per backend, every GPU code object any of these files carries, in the backend's order."""
    found: dict[str, set[str]] = {}
    for facts in files:
        for backend, codes in facts.device_code.items():
            found.setdefault(backend, set()).update(codes)
    order = dict(backends.device_codes())
    return {backend: sorted(codes, key=order[backend].order) for backend, codes in found.items()}


# --- the host that would run it -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HostLibraries:
    """Where this host's dynamic loader finds libraries: ldconfig's cache plus LD_LIBRARY_PATH."""

    paths: dict[str, str] = field(default_factory=dict)  # soname → path

    def find(self, soname: str) -> str | None:
        return self.paths.get(soname)


def parse_ldconfig(text: str, machine: str) -> dict[str, str]:
    """`ldconfig -p` → {soname: path} for this machine's word size and ABI (a 32-bit libfoo is no use)."""
    wanted = {"x86_64": "x86-64", "aarch64": "AArch64", "arm64": "AArch64"}.get(machine)
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if match and (wanted is None or wanted in match.group(2)):
            found.setdefault(match.group(1), match.group(3))
    return found


def host_libraries(environ: Mapping[str, str], machine: str, rpath: Sequence[Path] = ()) -> HostLibraries:
    """`rpath`: folders a build's own RPATH names on this host, which the loader searches before the others."""
    paths: dict[str, str] = {}
    for directory in [*map(str, rpath), *environ.get("LD_LIBRARY_PATH", "").split(":")]:
        if directory and os.path.isdir(directory):
            for name in os.listdir(directory):
                paths.setdefault(name, os.path.join(directory, name))
    for name, path in _loader_cache(machine).items():
        paths.setdefault(name, path)
    return HostLibraries(paths)


@functools.cache  # one ldconfig run per process, however many artifacts are judged
def _loader_cache(machine: str) -> dict[str, str]:
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.access(ldconfig, os.X_OK):
            found = parse_ldconfig(proc.run([ldconfig, "-p"]).stdout, machine).items()
            # the cache can name a file since removed (or hidden by a mount)
            return {name: path for name, path in found if os.path.exists(path)}
    return {}


def host_glibc() -> Version | None:
    try:
        return Version((os.confstr("CS_GNU_LIBC_VERSION") or "").split()[-1])
    except (ValueError, OSError, AttributeError, InvalidVersion, IndexError):
        return None  # musl, or not Linux


@functools.cache  # a library's ELF read once per process
def provided_versions(library: str) -> tuple[str, ...]:
    """The symbol versions a shared library defines (e.g. libstdc++'s GLIBCXX_3.4.30)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection

    try:
        with open(library, "rb") as handle:
            elf = ELFFile(handle)
            return tuple(
                aux.name
                for section in elf.iter_sections()
                if isinstance(section, GNUVerDefSection)
                for _, auxes in section.iter_versions()
                for aux in auxes
            )
    except (OSError, ELFError):
        return ()
