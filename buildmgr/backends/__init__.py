"""The registry of backends: one package each under backends/ (`BACKEND`, a `base.Backend` record of its names,
checks, arch option, vendor tool, GPU code, log lines, name tables, toolchains and CI needs), found by looking, so a
new backend is its own package and nothing else here. Nothing outside this package names a backend; the functions
here are the generic ways in, and what they derive (recipe conflicts, the CI provisioning, the enumeration table of
docs/spec.md) is no longer kept by hand.

Backend names are the ones llama.cpp prints (`CUDA0`, `Vulkan0`, `ROCm0` …).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from buildmgr.backend_spec import (
    NOT_A_CARD,
    ArchOption,
    Backend,
    Capture,
    DeviceCode,
    Fix,
    Host,
    Layered,
    LogDevice,
    NameRole,
    RemoteServer,
    RemovedKernels,
    Report,
    RuntimeFault,
    ShaderCache,
    Virtual,
)
from buildmgr.core.engines import CardFacts, EngineReading, EngineSource
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Check, Finding, Signature
from buildmgr.tools.kit_spec import Kit, PipSource

if TYPE_CHECKING:
    from buildmgr.core.crashes import Crash
    from buildmgr.core.device_records import Captures

__all__ = [
    "NOT_A_CARD",
    "ArchOption",
    "Backend",
    "Capture",
    "CardFacts",
    "Check",
    "DeviceCode",
    "EngineReading",
    "EngineSource",
    "Fix",
    "Host",
    "Layered",
    "LogDevice",
    "NameRole",
    "PipSource",
    "RemovedKernels",
    "Report",
    "RuntimeFault",
    "Virtual",
]


@functools.cache
def _discovered() -> tuple[Backend, ...]:
    """Every package under backends/ with its `BACKEND`, in their fixed order (CUDA's arch option before HIP's: their
    labels join into the build id; nvidia-smi's match before vulkaninfo's)."""
    import importlib

    folder = os.path.dirname(__file__)
    names = sorted(e.name for e in os.scandir(folder) if os.path.isfile(os.path.join(e.path, "__init__.py")))
    found = [importlib.import_module(f"{__name__}.{name}").BACKEND for name in names]
    return tuple(sorted(found, key=lambda b: b.order))


def all_backends() -> tuple[Backend, ...]:
    """Every backend buildmgr builds."""
    return tuple(b for b in _discovered() if b.built)


def _by_name() -> dict[str, Backend]:
    return {b.name: b for b in all_backends()}


def backend(name: str) -> Backend:
    found = _by_name()
    if name not in found:
        raise UserError(f"unknown backend {name!r} in a recipe; known: {', '.join(found)}")
    return found[name]


def known_backends() -> tuple[str, ...]:
    return tuple(_by_name())


def target(name: str) -> str:
    """The CMake target that proves a backend is in a build."""
    return backend(name).names.target


def all_kits() -> tuple[Kit, ...]:
    return tuple(kit for b in all_backends() for kit in b.kits)


def arch_options(names: tuple[str, ...] | None = None) -> list[ArchOption]:
    """The architecture options of these backends (of all, without names), in a fixed order."""
    chosen = all_backends() if names is None else [b for b in all_backends() if b.name in names]
    return [b.arch for b in chosen if b.arch is not None]


def captures() -> list[tuple[str, Capture]]:
    return [(b.name, b.capture) for b in all_backends() if b.capture is not None]


def remote() -> tuple[str, RemoteServer]:
    """The backend whose devices are other hosts' (RPC), and its server."""
    return next((b.name, b.remote) for b in all_backends() if b.remote is not None)


def device_codes() -> list[tuple[str, DeviceCode]]:
    return [(b.name, b.device_code) for b in all_backends() if b.device_code is not None]


def unknown_codes(device_code: Mapping[str, Sequence[str]]) -> list[str]:
    """The codes that are not what their backend's code is (`DeviceCode.pattern`): bytes a hostile index made up, on
    which the code's own readers would fail. A backend this buildmgr does not know is left to a newer one."""
    known = dict(device_codes())
    return [
        code
        for name, codes in device_code.items()
        if name in known
        for code in codes
        if not re.fullmatch(known[name].pattern, code)
    ]


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


def gpu_targets(environ: Mapping[str, str]) -> dict[str, list[str]]:
    """Per backend with GPU code, the GPUs here as its code must serve them (compute capabilities, gfx targets)."""
    return {name: code.targets(environ) for name, code in device_codes()}


def code_fits(device_code: Mapping[str, Sequence[str]], targets: Mapping[str, list[str]]) -> dict[str, list[Finding]]:
    """Per backend with GPU code in a build, a finding for each of these GPUs that cannot run it natively."""
    return {
        name: code.fits(device_code[name], targets.get(name, []))
        for name, code in device_codes()
        if device_code.get(name)
    }


def kernel_findings(device_code: Mapping[str, Sequence[str]], environ: Mapping[str, str]) -> list[Finding]:
    """Per backend with GPU code in a build, a finding for each GPU here that cannot run it."""
    return [
        finding
        for name, code in device_codes()
        if device_code.get(name)
        for finding in code.findings(device_code[name], environ)
    ]


def cpu_features() -> dict[str, tuple[str, ...]]:
    """Every backend's instruction-set defines (a build that lists its CPU's features) and the CPU flags each needs."""
    return {define: flags for known in all_backends() for define, flags in known.cpu_features.items()}


def cpu_features_lacking(defines: Sequence[str], cpu_flags: frozenset[str]) -> tuple[list[str], list[str]]:
    """(those of `defines` whose CPU flags `cpu_flags` (/proc/cpuinfo's) lack, each with the flags it lacks; those
    this buildmgr knows no flags of, a newer one's)."""
    known = cpu_features()
    lacking = []
    for define in (d for d in defines if d in known):
        missing = [flag for flag in known[define] if flag not in cpu_flags]
        if missing:
            lacking.append(f"{define} ({', '.join(missing)})")
    return lacking, [d for d in defines if d not in known]


def build_failures() -> tuple[Signature, ...]:
    return tuple(s for b in all_backends() for s in b.build_failures)


def runtime_faults() -> tuple[RuntimeFault, ...]:
    return tuple(f for b in all_backends() for f in b.runtime_faults)


def runtime_fault(name: str) -> RuntimeFault | None:
    return next((f for f in runtime_faults() if f.name == name), None)


def known_fault(crash: Crash) -> RuntimeFault | None:
    """The first known runtime fault a crash matches."""
    return next((f for f in runtime_faults() if f.matches(crash)), None)


def removed_kernels(names: Sequence[str], defines: Mapping[str, str]) -> list[RemovedKernels]:
    """What a build of these backends with these defines lacks: ops its devices hand to the CPU."""
    return [gap for b in all_backends() if b.name in names for gap in b.removed_kernels if gap.removes(defines)]


def log_devices() -> list[LogDevice]:
    """How every backend, built here or only seen in pasted logs, prints its devices at start."""
    return [row for b in _discovered() for row in b.log_devices]


def run_headers() -> list[str]:
    """The lines by which each backend begins its device list (its `after`, `header` and `starts`): one seen twice
    begins a new run of a program (two builds, two hosts, two runs pasted in one text)."""
    return list(dict.fromkeys(p for row in log_devices() for p in (row.after, row.header, row.starts) if p))


def start_headers() -> list[str]:
    """The lines by which each backend says it started (its `starts`): printed before the program's build line since
    backends register at start, so one after it is another program's."""
    return list(dict.fromkeys(row.starts for row in log_devices() if row.starts))


def log_formats() -> dict[str, str]:
    """Each format string of the pinned source that a backend's log rows read → the shape that reads it."""
    return {fmt: row.shape for row in log_devices() for fmt in row.formats}


def log_empty() -> list[str]:
    return [pattern for b in _discovered() for pattern in b.log_empty]


def name_roles() -> list[NameRole]:
    """Device families known from their names, from every vendor's package: a name is the same under every backend."""
    return [row for b in _discovered() for row in b.name_roles]


def name_role(description: str) -> NameRole | None:
    """The first family whose name pattern the description holds."""
    return next((row for row in name_roles() if re.search(row.pattern, description)), None)


def layered_card(description: str) -> tuple[str, Layered] | None:
    """(the card's own name, the driver) when the description is a layered driver's (Dozen on a card)."""
    for row in (row for b in _discovered() for row in b.layered):
        match = re.search(row.pattern, description)
        if match:
            return match["card"], row
    return None


def virtual_tag(backend: str, description: str) -> tuple[str, Virtual] | None:
    """(which physical device, the rule) when the description is of a device its backend emulates on that one."""
    for row in (row for b in _discovered() if b.name == backend for row in b.virtual):
        match = re.search(row.description, description)
        if match:
            return match["physical"], row
    return None


def card_description(backend: str, description: str) -> str:
    """The card's own description, without the tag its backend adds to an emulated device's."""
    tag = virtual_tag(backend, description)
    return re.sub(tag[1].description, "", description).strip() if tag else description


def physical_pci(backend: str, pci_bus_id: str | None) -> str | None:
    """The card's own PCI id where ggml suffixed it for an emulated device ('0000:06:00.0-v1' → '0000:06:00.0')."""
    for row in (row for b in _discovered() if b.name == backend for row in b.virtual):
        if pci_bus_id and row.device_id and (match := re.search(row.device_id, pci_bus_id)):
            return pci_bus_id[: match.start()]
    return pci_bus_id


def device_prefixes() -> set[str]:
    """Every prefix a device name of a known backend has (CUDA0, ROCm0, MTL0, BLAS …)."""
    return {name for b in all_backends() for name in (b.names.device, *b.other_names)} | set(NOT_A_CARD)


def library_backend(library: str) -> str | None:
    """The device prefix of the backend that a driving program's library name means (Ollama's `library=cuda`,
    `ROCm`, `oneapi`): a backend's prefix in any case, or one of its `library_names`; None for one no backend has."""
    wanted = library.lower()
    for known in _discovered():
        if wanted in (known.names.device.lower(), *(name.lower() for name in known.library_names)):
            return known.names.device
    return next((name for name in NOT_A_CARD if name.lower() == wanted), None)


def languages() -> tuple[str, ...]:
    """Every CMake language a build may compile: C, C++ and each backend's own."""
    return ("C", "CXX", *(language for b in all_backends() for language in b.languages))


def splits(device_backend: str) -> Mapping[str, str | None]:
    """What was observed of each split mode over a device of this backend (none for one that is not built)."""
    found = _by_name().get(device_backend)
    return found.splits if found is not None else {}


def open_engines() -> list[EngineSource]:
    """Every vendor's live view of its cards here (none where its library or sysfs files are absent)."""
    return [source for b in all_backends() if b.engines and (source := b.engines()) is not None]


def engine_sources() -> tuple[str, ...]:
    """What the engine readings can come from, in messages: NVML, amdgpu's sysfs."""
    return tuple(b.engines_source for b in all_backends() if b.engines)


def pinning_guards(device_backends: Sequence[str]) -> dict[str, str]:
    """The variables that keep these backends from page-locking host memory (see Backend.pinning_guard)."""
    guards = (_by_name()[b].pinning_guard for b in device_backends if b in _by_name())
    return dict(guard for guard in guards if guard)


def shader_caches() -> tuple[ShaderCache, ...]:
    return tuple(b.shader_cache for b in all_backends() if b.shader_cache is not None)


def owned_defines() -> dict[str, str]:
    """-D keys the architecture options set: each refused from the user, with the option to use instead."""
    return {key: f"use {option.flag}" for option in arch_options() for key in option.owns}


def check_defines(backends: tuple[str, ...], defines: Mapping[str, str], machine: str) -> None:
    """Each backend's own refusal of a combination of defines (the CPU's: GGML_NATIVE with GGML_BACKEND_DL on x86)."""
    for name in backends:
        check = backend(name).check_defines
        if check is not None:
            check(defines, machine)


def why_absent(name: str, environ: Mapping[str, str], found: Captures) -> str | None:
    known = _by_name().get(name)
    return known.why_absent(environ, found) if known is not None else "no device found"


def inputs(name: str, host: Host) -> tuple[str, ...]:
    """The files behind what a backend's checks and arch option find by running programs."""
    return backend(name).locate(host).inputs


def enumeration_variables() -> tuple[str, ...]:
    """Every variable that changes which devices some backend enumerates, and under which names."""
    return tuple(dict.fromkeys(v for b in all_backends() for v in b.enumeration_env))


def enumeration_table() -> str:
    """docs/spec.md's list of those variables, by backend (the spec holds this text; a test keeps it equal)."""
    return "; ".join(
        ", ".join(f"`{v}`" for v in b.enumeration_env) + f" ({b.name})" for b in all_backends() if b.enumeration_env
    )


def moves_with(device_backend: str) -> tuple[str, ...]:
    """The variables that rename a device of this backend (as llama.cpp prints it: CUDA, Vulkan, ROCm …)."""
    found = _by_name().get(device_backend)
    return found.enumeration_env if found is not None else ()


def gib_per_job(backends: tuple[str, ...]) -> float:
    return max(backend(name).gib_per_job for name in backends)


def library_source(soname: str) -> str:
    """Where a library that a build needs comes from, e.g. libvulkan.so.1 → the Vulkan loader (apt libvulkan1)."""
    major = re.search(r"\.so\.(\d+)", soname)
    for known in all_backends():
        for stem, source in known.runtime_libraries.items():
            if soname.startswith(stem):
                return source.format(major=major.group(1) if major else "N")
    return "a package of your distribution"


def own_build_conflict(parts: Sequence[tuple[str, tuple[str, ...]]], defines: Mapping[str, str]) -> str | None:
    """Why recipes (name, backends) cannot make one build: two backends that each need a build of their own (they
    share ggml-cuda's sources or compilers), unless the build loads backends as modules (GGML_BACKEND_DL)."""
    if defines.get("GGML_BACKEND_DL") == "ON":
        return None
    own = [(name, b) for name, names in parts for b in all_backends() if b.name in names and b.needs_own_build]
    for index, (first, a) in enumerate(own):
        for second, b in own[index + 1 :]:
            if a.name != b.name and first != second:
                return (
                    f"cannot combine {first} and {second}: {a.names.title} and {b.names.title} cannot share one "
                    "non-DL build; add universal to load each as a module"
                )
    return None
