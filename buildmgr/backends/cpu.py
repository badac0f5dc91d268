"""The CPU backend: always present; no tools beyond a C/C++ compiler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from buildmgr.backends.base import Extras, Host, Nothing, Report
from buildmgr.errors import UserError
from buildmgr.findings import Check

if TYPE_CHECKING:
    from buildmgr.devices import Captures

NAME = "CPU"
GGML_TARGET = "ggml-cpu"  # with GGML_CPU_ALL_VARIANTS: ggml-cpu-haswell, ggml-cpu-skylakex, …
MIN_CMAKE = "3.14"
GIB_PER_JOB = 2.0
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = ()
# Libraries the built files may need from the host (soname stem → where it comes from).
RUNTIME_LIBRARIES = {
    "libc.so": "glibc (libc6)",
    "libm.so": "glibc (libc6)",
    "ld-linux": "glibc (libc6)",
    "libgcc_s.so": "apt libgcc-s1",
    "libstdc++.so": "apt libstdc++6",
    "libgomp.so": "apt libgomp1 (OpenMP)",
}
# Where the artifacts workflow can build it, and the provisioning step it needs ("" none).
SYSTEMS = ("linux", "macos")
CI_SETUP = ""
# A library only a GPU host has, which every tool of a non-DL build loads at start ("": none).
DRIVER_LIBRARY = ""
EXTRAS = Extras()  # no arch option, vendor tool, GPU code or known failures of its own


def locate(host: Host) -> Nothing:
    return Nothing()


def inspect(host: Host, found: Nothing, deep: bool) -> Report:
    tools = host.toolchain
    checks = tuple(
        Check(NAME, tool.name, tool.found, tool.version or "not found", "apt-get install build-essential")
        for tool in (tools.cc, tools.cxx)
    )
    return Report(checks)


def check_defines(defines: dict[str, str], machine: str) -> None:
    """GGML_NATIVE bakes this CPU's features in, which defeats per-variant CPU backends on x86."""
    x86 = machine.lower() in {"x86_64", "amd64", "i686", "x86"}
    if x86 and defines.get("GGML_BACKEND_DL") == "ON" and defines.get("GGML_NATIVE") == "ON":
        raise UserError(
            "GGML_NATIVE=ON cannot be combined with GGML_BACKEND_DL=ON on x86: "
            "use the universal recipe, which builds every CPU variant with GGML_NATIVE=OFF"
        )


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    return None  # the CPU is always a device
