"""How artifacts are named after the host they are for: its OS and CPU in upstream's spelling."""

from __future__ import annotations

CPU_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
SYSTEM = {"Linux": "linux", "Darwin": "macos"}


def cpu_arch_of(machine: str) -> str:
    """`x86_64`/`amd64` → `x64`, `aarch64`/`arm64` → `arm64`; anything else as it is, lower case."""
    return CPU_ARCH.get(machine.lower(), machine.lower())


def artifact_stem(label: str, system: str, recipe: str, arch: str, cpu_arch: str) -> str:
    return "-".join(part for part in ("llama", label, "bin", system, recipe.replace("+", "-"), arch, cpu_arch) if part)
