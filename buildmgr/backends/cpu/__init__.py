"""The CPU backend: always present; no tools beyond a C/C++ compiler."""

from __future__ import annotations

from collections.abc import Mapping

from buildmgr.backend import Backend, Host, Names, Report
from buildmgr.errors import UserError
from buildmgr.findings import Check

# with GGML_CPU_ALL_VARIANTS its targets are ggml-cpu-haswell, ggml-cpu-skylakex, …
NAMES = Names("CPU", "cpu", "CPU", "", "ggml-cpu")


def inspect(host: Host, found: object, deep: bool) -> Report:
    tools = host.toolchain
    checks = tuple(
        Check(NAMES.device, tool.name, tool.found, tool.version or "not found", "apt-get install build-essential")
        for tool in (tools.cc, tools.cxx)
    )
    return Report(checks)


def check_defines(defines: Mapping[str, str], machine: str) -> None:
    """GGML_NATIVE bakes this CPU's features in, which defeats per-variant CPU backends on x86."""
    x86 = machine.lower() in {"x86_64", "amd64", "i686", "x86"}
    if x86 and defines.get("GGML_BACKEND_DL") == "ON" and defines.get("GGML_NATIVE") == "ON":
        raise UserError(
            "GGML_NATIVE=ON cannot be combined with GGML_BACKEND_DL=ON on x86: "
            "use the universal recipe, which builds every CPU variant with GGML_NATIVE=OFF"
        )


def why_absent(environ: Mapping[str, str], captures: object) -> str | None:
    return None  # the CPU is always a device


BACKEND = Backend(
    NAMES,
    order=0,
    runtime_libraries={
        "libc.so": "glibc (libc6)",
        "libm.so": "glibc (libc6)",
        "ld-linux": "glibc (libc6)",
        "libgcc_s.so": "apt libgcc-s1",
        "libstdc++.so": "apt libstdc++6",
        "libgomp.so": "apt libgomp1 (OpenMP)",
    },
    systems=("linux", "macos"),
    inspect=inspect,
    why_absent=why_absent,
    check_defines=check_defines,
)
