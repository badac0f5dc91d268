"""The CPU backend: always present; no tools beyond a C/C++ compiler."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from buildmgr.backend_spec import Backend, Fix, Host, Names, Report, RuntimeFault
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Check

if TYPE_CHECKING:
    from buildmgr.core.crashes import Crash

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


# ggml's x86 feature options (GGML_NATIVE=OFF) and the /proc/cpuinfo flags each needs: what -march=native would give
# ggml, listed, so that one of them can be left out
X86_FEATURES = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_F16C": ("f16c",),
    "GGML_FMA": ("fma",),
    "GGML_AVX2": ("avx2",),
    "GGML_BMI2": ("bmi2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512vbmi",),
    "GGML_AVX512_VNNI": ("avx512_vnni",),
    "GGML_AVX512_BF16": ("avx512_bf16",),
}
AMX = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
# GGML_CPU_ALL_VARIANTS' variants with AMX kernels
AMX_VARIANTS = ("ggml-cpu-sapphirerapids",)


def amx_crashed(crash: Crash) -> bool:
    """Killed by a fault (SIGILL, SIGSEGV, SIGBUS) on the CPU, dead in an AMX function or with its weights in ggml's
    AMX buffers and failing again alone (a weight type, or the function), and not with --repack 0."""
    faulted = crash.signal in ("SIGILL", "SIGSEGV", "SIGBUS")
    amx = "amx" in (crash.function or "").lower() or ("AMX" in crash.buffers and bool(crash.kinds or crash.function))
    return faulted and crash.device == "CPU" and amx and crash.without_extra is not False


def without_amx(defines: Mapping[str, str], cpu_flags: frozenset[str]) -> Fix | None:
    """A native build: GGML_NATIVE=OFF with this CPU's features listed, AMX off (only ggml-cpu's objects change: the
    rest comes from the compile cache). A
    build of every CPU variant: the AMX variant left out, so that the loader picks the best of the others."""
    if defines.get("GGML_BACKEND_DL") == "ON" and defines.get("GGML_CPU_ALL_VARIANTS") == "ON":
        return Fix(left_out=AMX_VARIANTS)
    if defines.get("GGML_NATIVE", "ON") != "ON" or not {"amx_tile", "amx_int8"} & cpu_flags:
        return None
    listed = {key: "ON" if set(flags) <= cpu_flags else "OFF" for key, flags in X86_FEATURES.items()}
    return Fix(defines={"GGML_NATIVE": "OFF", **listed, **dict.fromkeys(AMX, "OFF")}, essential=("GGML_NATIVE", *AMX))


AMX_KERNELS = RuntimeFault(
    "amx-kernels",
    amx_crashed,
    cause="ggml's AMX kernels for quantized matmuls (its AMX buffer type, on for a CPU with AMX when the build "
    "has -march=native or the sapphirerapids variant) crash on this CPU when built by this compiler: their tile "
    "configuration is not kept ahead of the tile instructions nor granted per thread (llama.cpp PR #26954, "
    "issue #28756)",
    workaround="llama-bench --repack 0, llama-cli/llama-server --no-repack (every extra buffer type off, "
    "repacking too); or build it again with buildmgr, which leaves the AMX kernels out",
    fix=without_amx,
    fixed="ggml's AMX kernels left out: they crashed here",
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
    runtime_faults=(AMX_KERNELS,),
    cpu_features={
        **X86_FEATURES,
        "GGML_AMX_TILE": ("amx_tile",),
        "GGML_AMX_INT8": ("amx_int8",),
        "GGML_AMX_BF16": ("amx_bf16",),
    },
)
