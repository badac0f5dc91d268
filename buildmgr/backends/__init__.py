"""Per-backend knowledge, one module each: what to check before compiling, which ggml target proves
the backend is in the build, which host paths CMake needs, and how much memory a compile job takes.

Backend names are the ones llama.cpp prints (`CUDA0`, `Vulkan0`, `ROCm0` …).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from buildmgr.errors import UserError

if TYPE_CHECKING:  # the device commands read backend facts without paying for the toolchain's imports
    from pathlib import Path

    from buildmgr.probe import NvidiaGpu, VulkanGpu
    from buildmgr.toolchain import Toolchain


# Devices that are not a card: BLAS does the CPU's matrix work, and RPC is another host. Each has a fixed role
# (whatever ggml reports), is never one physical card with another backend's device, and is not benched.
NOT_A_CARD = {"BLAS": "accel", "RPC": "remote"}


@dataclass(frozen=True)
class Check:
    """One preflight fact: what was looked for, what was found, and how to fix it if it failed."""

    backend: str
    what: str
    ok: bool
    found: str = ""
    fix: str = ""

    def line(self) -> str:
        return f"{self.backend}: {self.what}: {self.found}" + ("" if self.ok else f"; {self.fix}")


@dataclass(frozen=True)
class Report:
    checks: tuple[Check, ...] = ()
    host_defines: dict[str, str] = field(default_factory=dict)  # paths on this host: not identity
    versions: dict[str, str] = field(default_factory=dict)  # versions that change the binaries: identity

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {
            "checks": [asdict(c) for c in self.checks],
            "host_defines": self.host_defines,
            "versions": self.versions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        return cls(tuple(Check(**c) for c in data["checks"]), dict(data["host_defines"]), dict(data["versions"]))


@dataclass(frozen=True)
class Host:
    """What a backend may look at. Read once, so checks are pure over it in tests."""

    environ: dict[str, str]
    system: str
    machine: str
    toolchain: Toolchain


T = TypeVar("T")


@dataclass(frozen=True)
class ArchOption:
    """A backend's GPU-architecture option of `buildmgr build` (`--sm` for CUDA, `--gfx` for HIP)."""

    flag: str
    define: str  # the CMake define its value resolves to
    language: str  # how an error names the backend
    example: str
    resolve: Callable[[str | None, Host, Memo], tuple[str, str]]  # value (or None) → (define value, label)


def stamps(paths: tuple[str, ...]) -> list[list[Any]]:
    """Path, size and mtime of each file: while these stay, so does what running or reading them said."""
    found: list[list[Any]] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            found.append([path, None])
            continue
        found.append([path, os.path.realpath(path), stat.st_size, stat.st_mtime_ns])
    return found


@dataclass
class Memo:
    """Preflight facts that cost a program run (nvcc --version, --list-gpu-arch, a compile probe), kept while the
    files behind them stay, so a no-op build of a GPU recipe starts no program. `doctor` never uses it."""

    entries: dict[str, Any] = field(default_factory=dict)
    changed: bool = False
    LIMIT = 64  # entries; the oldest go first

    @classmethod
    def load(cls, path: Path) -> Memo:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        return cls(data) if isinstance(data, dict) else cls()

    def recall(
        self,
        key: list[Any],
        compute: Callable[[], T],
        encode: Callable[[T], Any],
        decode: Callable[[Any], T],
        keep: Callable[[T], bool] = lambda _: True,
    ) -> T:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        if digest in self.entries:
            try:
                return decode(self.entries[digest])
            except (KeyError, TypeError, ValueError):
                pass  # written by another buildmgr version: compute again
        value = compute()
        if keep(value):
            self.entries[digest] = encode(value)
            self.changed = True
        return value

    def save(self, path: Path) -> None:
        from buildmgr.fsutil import atomic_write_text

        if self.changed:
            kept = dict(list(self.entries.items())[-self.LIMIT :])
            atomic_write_text(path, json.dumps(kept))


def one_to_one(devices: list[Any], rows: list[Any], same: Callable[[Any, Any], bool]) -> dict[str, Any]:
    """Device name → the one row (of nvidia-smi, vulkaninfo …) it matches, where that row matches no other device."""
    matches = {d.name: [r for r in rows if same(d, r)] for d in devices}
    claimed = Counter(id(r) for found in matches.values() for r in found)
    return {name: found[0] for name, found in matches.items() if len(found) == 1 and claimed[id(found[0])] == 1}


def which(name: str, *dirs: str) -> str | None:
    for directory in dirs:
        if directory and os.access(os.path.join(directory, name), os.X_OK):
            return os.path.join(directory, name)
    return shutil.which(name)


class Backend(Protocol):
    """What every module in backends/ provides (a test holds each one to it). A module that runs programs in
    `inspect` also names their files in `inputs(host)`, so that its answers can be remembered."""

    NAME: str  # as llama.cpp prints its devices: CUDA0, Vulkan0, ROCm0 …
    GGML_TARGET: str  # the CMake target that proves the backend is in a build
    MIN_CMAKE: str
    GIB_PER_JOB: float  # memory one compile job of this backend takes
    ENUMERATION_ENV: tuple[str, ...]  # variables that hide, reorder or rename its devices
    RUNTIME_LIBRARIES: dict[str, str]  # soname stem → where it comes from
    SYSTEMS: tuple[str, ...]  # where the artifacts workflow can build it
    CI_SETUP: str  # the provisioning step that workflow needs ("" none)
    DRIVER_LIBRARY: str  # the library a device of it needs at run time ("" none)
    ARCH: ArchOption | None  # its GPU-architecture option; None where it has none

    def inspect(self, host: Host, deep: bool) -> Report: ...

    def why_absent(self, environ: dict[str, str], vulkan: list[VulkanGpu], nvidia: list[NvidiaGpu]) -> str | None:
        """Why a build with this backend shows no device of it here; None where no device is expected."""
        ...


def _modules() -> dict[str, Backend]:
    from buildmgr.backends import cpu, cuda, hip, metal, rpc, sycl, vulkan

    return {m.NAME: m for m in (cpu, cuda, vulkan, hip, sycl, metal, rpc)}


def module(name: str) -> Backend:
    modules = _modules()
    if name not in modules:
        raise UserError(f"unknown backend {name!r} in a recipe; known: {', '.join(modules)}")
    return modules[name]


def arch_options(names: tuple[str, ...] | None = None) -> list[ArchOption]:
    """The architecture options of these backends (of all, without names), in a fixed order: CUDA's before HIP's,
    as their labels join into the build id."""
    chosen = _modules().values() if names is None else [m for m in _modules().values() if m.NAME in names]
    return [m.ARCH for m in chosen if m.ARCH is not None]


def why_absent(name: str, environ: dict[str, str], vulkan: list[VulkanGpu], nvidia: list[NvidiaGpu]) -> str | None:
    found = _modules().get(name)
    return found.why_absent(environ, vulkan, nvidia) if found is not None else "no device found"


def known_backends() -> tuple[str, ...]:
    return tuple(_modules())


def inspect(backends: tuple[str, ...], host: Host, deep: bool = True, memo: Memo | None = None) -> Report:
    """Preflight every backend of a recipe. `deep` also compiles a probe (nvcc) where that is the only proof.

    With a memo, a backend that runs programs (it names their files in `inputs`) is not asked again while those
    files stay; a report with a failure is never kept, so a fix is seen at once."""
    checks: list[Check] = []
    defines: dict[str, str] = {}
    versions: dict[str, str] = {}
    for name in backends:
        backend = module(name)
        if memo is not None and hasattr(backend, "inputs"):
            report = memo.recall(
                ["inspect", name, deep, stamps(backend.inputs(host))],
                functools.partial(backend.inspect, host, deep),
                Report.to_json,
                Report.from_json,
                keep=lambda r: not r.failures,
            )
        else:
            report = backend.inspect(host, deep)
        checks.extend(report.checks)
        defines.update(report.host_defines)
        versions.update(report.versions)
        minimum = backend.MIN_CMAKE
        cmake = host.toolchain.cmake
        if cmake.found and _older(cmake.version, minimum):
            checks.append(
                Check(
                    name,
                    "cmake",
                    False,
                    cmake.version or "?",
                    f"the {name} backend needs cmake >= {minimum}: pip install -U cmake",
                )
            )
    return Report(tuple(checks), defines, versions)


def _older(version: str | None, minimum: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version or "0") < Version(minimum)
    except InvalidVersion:
        return False


def enumeration_variables() -> tuple[str, ...]:
    """Every variable that changes which devices some backend enumerates, and under which names."""
    return tuple(dict.fromkeys(v for m in _modules().values() for v in m.ENUMERATION_ENV))


def moves_with(device_backend: str) -> tuple[str, ...]:
    """The variables that rename a device of this backend (as llama.cpp prints it: CUDA, Vulkan, ROCm …)."""
    found = _modules().get(device_backend)
    return found.ENUMERATION_ENV if found is not None else ()


def gib_per_job(backends: tuple[str, ...]) -> float:
    return max(module(name).GIB_PER_JOB for name in backends)


def library_source(soname: str) -> str:
    """Where a library that a build needs comes from, e.g. libvulkan.so.1 → the Vulkan loader (apt libvulkan1)."""
    for backend in _modules().values():
        for stem, source in backend.RUNTIME_LIBRARIES.items():
            if soname.startswith(stem):
                return source
    return "a package of your distribution"


def unbuildable_in_ci(backends: tuple[str, ...], system: str, loadable: bool) -> str | None:
    """Why the artifacts workflow cannot build (and smoke-run) these backends on a GPU-less runner of this OS."""
    for name in backends:
        backend = module(name)
        if system not in backend.SYSTEMS:
            return f"{name} does not build on {system}"
        if backend.CI_SETUP is None:
            return f"the artifacts workflow has no step that installs {name}'s toolkit"
        if backend.DRIVER_LIBRARY and not loadable:
            return (
                f"every tool of a non-DL {name} build loads {backend.DRIVER_LIBRARY} at start, which a GPU-less runner "
                f"lacks, so its smoke run cannot pass; add universal (backends as loadable modules)"
            )
    return None


def ci_setup(backends: tuple[str, ...]) -> tuple[str, ...]:
    """The workflow's provisioning steps these backends need, e.g. ('cuda', 'vulkan')."""
    return tuple(sorted({module(name).CI_SETUP for name in backends} - {"", None}))
