"""Builds as release artifacts: a CI matrix (`matrix`), byte-identical archives and the reading of one (`archive`),
whether a host can run one (`compat`), installing one as a build (`install`), and rebuilding one from its receipt to
compare (`reproduce`).

Naming follows upstream's `llama-<tag>-bin-<os>-<variant>-<cpu>.tar.gz`. A recipe's `+` becomes `-`
(`cuda+vulkan` → `cuda-vulkan`): release assets are served from object storage whose URL decoding turns a `+` in a
path into a space, and upstream never puts one in a name.
"""

from __future__ import annotations

CPU_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
SYSTEM = {"Linux": "linux", "Darwin": "macos"}


def cpu_arch_of(machine: str) -> str:
    """`x86_64`/`amd64` → `x64`, `aarch64`/`arm64` → `arm64`; anything else as it is, lower case."""
    return CPU_ARCH.get(machine.lower(), machine.lower())


def artifact_stem(label: str, system: str, recipe: str, arch: str, cpu_arch: str) -> str:
    return "-".join(part for part in ("llama", label, "bin", system, recipe.replace("+", "-"), arch, cpu_arch) if part)
