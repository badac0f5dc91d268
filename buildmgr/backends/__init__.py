"""Per-backend knowledge, one module each, behind the `Backend` Protocol (in `base`): where its toolkit is on this host
(`locate`), what to check before compiling, which ggml target proves it is in a build, its GPU-architecture option,
the vendor tool whose capture adds to ggml's device list, the GPU code its binaries carry, and the build failures
it is known for. Nothing outside this package names a backend; the functions here are the generic ways in.

Backend names are the ones llama.cpp prints (`CUDA0`, `Vulkan0`, `ROCm0` …).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from buildmgr.backends.base import (
    NOT_A_CARD,
    ArchOption,
    Backend,
    Capture,
    DeviceCode,
    EngineReading,
    EngineSource,
    Extras,
    Host,
    Kit,
    Layered,
    LogDevice,
    NameRole,
    PipSource,
    Report,
)
from buildmgr.errors import UserError
from buildmgr.findings import Check, Finding, Signature
from buildmgr.memo import Memo, stamps

if TYPE_CHECKING:
    from buildmgr.devices import Captures

__all__ = [
    "NOT_A_CARD",
    "ArchOption",
    "Backend",
    "Capture",
    "Check",
    "DeviceCode",
    "EngineReading",
    "EngineSource",
    "Extras",
    "Host",
    "Layered",
    "LogDevice",
    "NameRole",
    "Report",
]


@functools.cache
def all_modules() -> tuple[Backend, ...]:
    """Every backend, in a fixed order: CUDA's arch option before HIP's (their labels join into the build id),
    nvidia-smi's match before vulkaninfo's."""
    from buildmgr.backends import cpu, cuda, hip, metal, rpc, sycl, vulkan

    return (cpu, cuda, vulkan, hip, sycl, metal, rpc)


def _by_name() -> dict[str, Backend]:
    return {m.NAME: m for m in all_modules()}


def module(name: str) -> Backend:
    modules = _by_name()
    if name not in modules:
        raise UserError(f"unknown backend {name!r} in a recipe; known: {', '.join(modules)}")
    return modules[name]


def known_backends() -> tuple[str, ...]:
    return tuple(_by_name())


def arch_options(names: tuple[str, ...] | None = None) -> list[ArchOption]:
    """The architecture options of these backends (of all, without names), in a fixed order."""
    chosen = all_modules() if names is None else [m for m in all_modules() if m.NAME in names]
    return [m.EXTRAS.arch for m in chosen if m.EXTRAS.arch is not None]


def captures() -> list[tuple[str, Capture]]:
    return [(m.NAME, m.EXTRAS.capture) for m in all_modules() if m.EXTRAS.capture is not None]


def device_codes() -> list[tuple[str, DeviceCode]]:
    return [(m.NAME, m.EXTRAS.device_code) for m in all_modules() if m.EXTRAS.device_code is not None]


def runtime_of_schema_1(runtime: Mapping[str, Any]) -> dict[str, Any]:
    """A schema-1 receipt's `runtime` as schema 2's: each backend's own fields become its `device_code` entry."""
    kept = dict(runtime)
    found: dict[str, list[Any]] = {}
    for name, code in device_codes():
        fields = [kept.pop(key, []) for key in code.schema_1]
        wrong = [value for value in fields if not isinstance(value, list)]
        # a field of the wrong shape is carried over as it is, so that the reader refuses the receipt for it
        values = wrong[0] if wrong else [item for value in fields for item in value]
        if values:
            found[name] = values
    return kept | {"device_code": found}


def kernel_findings(device_code: Mapping[str, Sequence[str]], environ: Mapping[str, str]) -> list[Finding]:
    """Per backend with GPU code in a build, a finding for each GPU here that cannot run it."""
    return [
        finding
        for name, code in device_codes()
        if device_code.get(name)
        for finding in code.findings(device_code[name], environ)
    ]


def build_failures() -> tuple[Signature, ...]:
    return tuple(s for m in all_modules() for s in m.EXTRAS.build_failures)


def _text_extras() -> tuple[Extras, ...]:
    """What every backend, built here or only seen in pasted logs, knows about its devices' text."""
    from buildmgr.backends import unbuilt

    return (*(m.EXTRAS for m in all_modules()), unbuilt.EXTRAS)


def log_devices() -> list[LogDevice]:
    return [row for extras in _text_extras() for row in extras.log_devices]


def log_empty() -> list[str]:
    return [pattern for extras in _text_extras() for pattern in extras.log_empty]


def name_roles() -> list[NameRole]:
    """Device families known from their names, from every vendor's module: a name is the same under every backend."""
    return [row for extras in _text_extras() for row in extras.name_roles]


def name_role(description: str) -> NameRole | None:
    """The first family whose name pattern the description holds."""
    return next((row for row in name_roles() if re.search(row.pattern, description)), None)


def layered_card(description: str) -> tuple[str, Layered] | None:
    """(the card's own name, the driver) when the description is a layered driver's (Dozen on a card)."""
    for row in (row for extras in _text_extras() for row in extras.layered):
        match = re.search(row.pattern, description)
        if match:
            return match["card"], row
    return None


def languages() -> tuple[str, ...]:
    """Every CMake language a build may compile: C, C++ and each backend's own."""
    return ("C", "CXX", *(language for m in all_modules() for language in m.EXTRAS.languages))


def splits(device_backend: str) -> Mapping[str, str | None]:
    """What was observed of each split mode over a device of this backend (none for one that is not a module)."""
    backend = _by_name().get(device_backend)
    return backend.EXTRAS.splits if backend is not None else {}


def open_engines() -> list[EngineSource]:
    """Every vendor's live view of its cards here (none where its library or sysfs files are absent)."""
    return [source for m in all_modules() if m.EXTRAS.engines and (source := m.EXTRAS.engines()) is not None]


def pinning_guards(device_backends: Sequence[str]) -> dict[str, str]:
    """The variables that keep these backends from page-locking host memory (see Extras.pinning_guard)."""
    guards = (_by_name()[b].EXTRAS.pinning_guard for b in device_backends if b in _by_name())
    return dict(guard for guard in guards if guard)


def shader_compilers() -> tuple[str, ...]:
    return tuple(m.EXTRAS.shader_compiler for m in all_modules() if m.EXTRAS.shader_compiler)


def owned_defines() -> dict[str, str]:
    """-D keys the architecture options set: each refused from the user, with the option to use instead."""
    return {key: f"use {option.flag}" for option in arch_options() for key in option.owns}


def why_absent(name: str, environ: Mapping[str, str], found: Captures) -> str | None:
    backend = _by_name().get(name)
    return backend.why_absent(environ, found) if backend is not None else "no device found"


def inputs(name: str, host: Host) -> tuple[str, ...]:
    """The files behind what a backend's checks and arch option find by running programs."""
    return module(name).locate(host).inputs


def inspect(backends: tuple[str, ...], host: Host, deep: bool = True, memo: Memo | None = None) -> Report:
    """Preflight every backend of a recipe. `deep` also compiles a probe (nvcc) where that is the only proof.

    With a memo, a backend that runs programs (its `locate` names their files) is not asked again while those files
    stay; a report with a failure is never kept, so a fix is seen at once."""
    checks: list[Check] = []
    defines: dict[str, str] = {}
    versions: dict[str, str] = {}
    for name in backends:
        backend = module(name)
        found = backend.locate(host)
        if memo is not None and found.inputs:
            report = memo.recall(
                ["inspect", name, deep, stamps(found.inputs)],
                functools.partial(backend.inspect, host, found, deep),
                Report.to_json,
                Report.from_json,
                keep=lambda r: not r.failures,
            )
        else:
            report = backend.inspect(host, found, deep)
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
    return tuple(dict.fromkeys(v for m in all_modules() for v in m.ENUMERATION_ENV))


def moves_with(device_backend: str) -> tuple[str, ...]:
    """The variables that rename a device of this backend (as llama.cpp prints it: CUDA, Vulkan, ROCm …)."""
    found = _by_name().get(device_backend)
    return found.ENUMERATION_ENV if found is not None else ()


def gib_per_job(backends: tuple[str, ...]) -> float:
    return max(module(name).GIB_PER_JOB for name in backends)


def library_source(soname: str) -> str:
    """Where a library that a build needs comes from, e.g. libvulkan.so.1 → the Vulkan loader (apt libvulkan1)."""
    for backend in all_modules():
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
    return tuple(sorted({module(name).CI_SETUP for name in backends} - {"", None}))  # type: ignore[arg-type]


def pypi_kits(backends: tuple[str, ...]) -> tuple[Kit, ...]:
    """The build toolchains `toolchain add` makes from PyPI for these backends (CUDA's), so a stock runner builds them."""
    return tuple(
        kit for name in backends for kit in module(name).EXTRAS.kits if kit.builds and isinstance(kit.source, PipSource)
    )


def ci_runner(backends: tuple[str, ...]) -> tuple[str, str] | None:
    """The (ubuntu release, container) these backends need on a Linux runner: a container wins, then the newest
    release; None where any runner does."""
    needs = [module(name).EXTRAS.ci_runner for name in backends]
    found = [n for n in needs if n is not None]
    return max(found, key=lambda n: (bool(n[1]), n[0]), default=None)
