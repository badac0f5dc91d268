"""What this host has shown: the known runtime faults a build's proof met here, kept in `<cache>/faults.json`, so that
every later build with the same compiler on the same CPU leaves the fault out from the start (a build on another
compiler or CPU tries again: the fault depends on both).

A fault is remembered only after a proof saw it crash; nothing here is guessed from the CPU's name."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from buildmgr import backends
from buildmgr.backend_spec import Fix, RuntimeFault
from buildmgr.core import hostfacts, jsonshape
from buildmgr.core.config import Dirs
from buildmgr.core.fsutil import atomic_write_text, locked
from buildmgr.core.jsonshape import ShapeError
from buildmgr.store.receipt import FixRecord
from buildmgr.tools.toolchain import Toolchain

SCHEMA = 1


@dataclass(frozen=True)
class SeenFault:
    fault: str  # a backend's `RuntimeFault.name`
    compiler: str  # the C++ compiler's path and version
    cpu: str  # the CPU's name and its feature flags' count: one CPU model and microcode family
    crash: str  # what the proof saw (`Crash.line`)
    build: str  # the build id whose proof saw it
    when: str


@dataclass(frozen=True)
class FaultsFile:
    schema: int
    seen: tuple[SeenFault, ...] = ()


def here(toolchain: Toolchain) -> tuple[str, str]:
    """What a fault seen here is kept under: the C++ compiler (path and version) and this CPU (name, flag count)."""
    facts = hostfacts.read()
    return f"{toolchain.cxx.path} {toolchain.cxx.version}", f"{facts.cpu} ({len(facts.cpu_flags)} flags)"


def path(dirs: Dirs) -> Path:
    return dirs.cache / "faults.json"


def read(dirs: Dirs, warn: Callable[[str], None] = lambda m: None) -> tuple[SeenFault, ...]:
    file = path(dirs)
    try:
        loaded: FaultsFile = jsonshape.load(FaultsFile, json.loads(file.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return ()
    except (OSError, ValueError, ShapeError) as error:
        warn(f"{file}: not read ({error}); faults seen before are tried again")
        return ()
    return loaded.seen


def remember(dirs: Dirs, seen: SeenFault) -> None:
    """Add what a proof saw, atomically under the file's lock (two builds may learn at once)."""
    file = path(dirs)
    file.parent.mkdir(parents=True, exist_ok=True)
    with locked(file.with_suffix(".lock")):
        known = [s for s in read(dirs) if (s.fault, s.compiler, s.cpu) != (seen.fault, seen.compiler, seen.cpu)]
        record = FaultsFile(SCHEMA, (*known, seen))
        atomic_write_text(file, json.dumps(jsonshape.dump(record), indent=2) + "\n")


def seen_now(fault: RuntimeFault, crash: str, build: str, compiler: str, cpu: str) -> SeenFault:
    return SeenFault(fault.name, compiler, cpu, crash, build, datetime.now(UTC).isoformat(timespec="seconds"))


def fixes(
    seen: tuple[SeenFault, ...],
    defines: Mapping[str, str],
    given: Mapping[str, str],
    compiler: str,
    cpu: str,
    cpu_flags: frozenset[str],
) -> tuple[list[FixRecord], list[str]]:
    """The fixes of the faults seen with this compiler on this CPU that apply to a build of `defines`, and a note for
    each one the user's own -D defines (`given`) overrule: their build is made as asked, and its proof will say."""
    applied: list[FixRecord] = []
    overruled: list[str] = []
    for entry in seen:
        fault = backends.runtime_fault(entry.fault)
        if fault is None or (entry.compiler, entry.cpu) != (compiler, cpu):
            continue
        fix: Fix | None = fault.fix(defines, cpu_flags)
        if fix is None:
            continue
        clash = sorted(set(fix.essential) & set(given))
        if clash:
            overruled.append(f"{entry.fault} crashed here before ({entry.crash}); -D {', '.join(clash)} keeps it in")
            continue
        defines = {key: value for key, value in fix.defines.items() if key not in given}  # the user's own win
        applied.append(FixRecord(entry.fault, fault.fixed, entry.crash, defines, tuple(fix.left_out)))
    return applied, overruled
