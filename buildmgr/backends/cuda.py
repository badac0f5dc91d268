"""CUDA: nvcc, its host compiler, and the compute capabilities it can build; nvidia-smi's view of the GPUs; the
SASS and PTX in `.nv_fatbin`.

Arch policy for `--sm`: real machine code (SASS) for every listed capability, and PTX only for
the highest, so newer GPUs can still JIT it: `--sm 86,89` → CMAKE_CUDA_ARCHITECTURES=86-real;89.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import struct
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from buildmgr import proc
from buildmgr.backends import base
from buildmgr.backends.base import (
    ArchOption,
    Capture,
    DeviceCode,
    EngineReading,
    Extras,
    Host,
    LogDevice,
    NameRole,
    Report,
    one_to_one,
    process_name,
    which,
)
from buildmgr.errors import UserError
from buildmgr.findings import Check, Finding, Signature
from buildmgr.memo import Memo, stamps

if TYPE_CHECKING:
    from buildmgr.devices import Captures, Device

NAME = "CUDA"
GGML_TARGET = "ggml-cuda"
MIN_CMAKE = "3.18"
GIB_PER_JOB = 4.0  # nvcc on ggml-cuda's template instances
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GGML_CUDA_DEVICES")
# Libraries the built files may need from the host (soname stem → where it comes from).
RUNTIME_LIBRARIES = {
    "libcuda.so": "the NVIDIA driver",
    "libcudart.so": "the CUDA runtime: apt cuda-cudart-13-0, or 'buildmgr toolchain add cuda-runtime==13.0'",
    "libcublas.so": "cuBLAS: apt libcublas-13-0, or 'buildmgr toolchain add cuda-runtime==13.0'",
    "libcublasLt.so": "cuBLAS: apt libcublas-13-0, or 'buildmgr toolchain add cuda-runtime==13.0'",
    "libnccl.so": "NCCL: apt libnccl2, or pip nvidia-nccl",
}
# Where the artifacts workflow can build it, and the provisioning step it needs ("" none).
SYSTEMS = ("linux",)
CI_SETUP = "cuda"
# The workflow's CUDA toolkit: upstream's own release image at the pin. Its major decides the lowest --sm.
CI_IMAGE_VERSION = "13.4.1"
CI_CONTAINER = f"nvidia/cuda:{CI_IMAGE_VERSION}-devel-ubuntu24.04"
DRIVER_LIBRARY = "libcuda.so.1"
# Seen at the pin on 2×H200: no split buffer type; any CUDA device in a -sm tensor set aborts.
SPLITS: dict[str, str | None] = {"row": "row-split-unsupported", "tensor": "tensor-split-unsupported"}
BUILD_FAILURES = (
    Signature(
        "unsupported-gpu-arch",
        r"Unsupported gpu architecture '(compute|sm)_\d+\w*'",
        "this nvcc cannot build that compute capability: pick another --sm (CUDA 13 builds 75 and newer)",
    ),
    Signature(
        "no-cuda-device-for-native",
        r"Unsupported gpu architecture 'compute_No CUDA devices found",
        "CMake asked for the native CUDA arch on a host without a visible GPU: pass --sm, e.g. --sm 86",
    ),
    Signature(
        "unsupported-host-compiler",
        r"unsupported GNU version|unsupported (clang|Microsoft Visual Studio) version",
        "nvcc does not support this host compiler: install a supported gcc and set CUDAHOSTCXX=/usr/bin/g++-N",
    ),
    Signature(
        "cuda-driver-library-missing",
        r"CUDA::cuda_driver\s+but the target was not found",
        "the CUDA driver library (libcuda.so) is missing: buildmgr toolchain add cuda (its lib/stubs/libcuda.so), "
        "install the NVIDIA driver or the toolkit's lib64/stubs/libcuda.so, or build without it: -D GGML_CUDA_NO_VMM=ON",
    ),
)
_SM = re.compile(r"^(\d{1,2})\.?(\d)([af]?)$")
# Lowest capability each nvcc major can build, when `nvcc --list-gpu-arch` is not available.
_LOWEST_BY_MAJOR = {11: 35, 12: 50, 13: 75}
_TOOLKIT_ROOTS = ("CUDA_HOME", "CUDAToolkit_ROOT", "CUDA_PATH")  # variables naming the toolkit, first wins
_DEFAULT_BIN = "/usr/local/cuda/bin"
_CUBLAS_LIBRARIES = ("lib64/libcublas.so*", "targets/*/lib/libcublas.so*", "lib/libcublas.so*")
_CUBLAS_HEADERS = ("include/cublas_v2.h", "targets/*/include/cublas_v2.h")


class Toolkit(NamedTuple):
    """The CUDA toolkit found here: nvcc, the root it sits in, cuBLAS and the host compiler nvcc will use."""

    nvcc: str | None
    cublas_libraries: tuple[Path, ...] = ()
    cublas_headers: tuple[Path, ...] = ()
    host_compiler: str | None = None

    @property
    def root(self) -> Path | None:
        return Path(self.nvcc).resolve().parent.parent if self.nvcc else None

    @property
    def inputs(self) -> tuple[str, ...]:
        if self.nvcc is None:
            return ()
        compiler = [self.host_compiler] if self.host_compiler else []
        return (self.nvcc, *compiler, *map(str, self.cublas_libraries + self.cublas_headers))


def find_nvcc(environ: Mapping[str, str]) -> str | None:
    roots = [environ.get(k, "") for k in _TOOLKIT_ROOTS]
    return which("nvcc", *(os.path.join(r, "bin") for r in roots if r), _DEFAULT_BIN)


def locate(host: Host) -> Toolkit:
    nvcc = find_nvcc(host.environ)
    if nvcc is None:
        return Toolkit(None)
    root = Path(nvcc).resolve().parent.parent
    libraries = tuple(p for pattern in _CUBLAS_LIBRARIES for p in root.glob(pattern))
    headers = tuple(p for pattern in _CUBLAS_HEADERS for p in root.glob(pattern))
    return Toolkit(nvcc, libraries, headers, host.environ.get("CUDAHOSTCXX") or host.toolchain.cxx.path)


def parse_nvcc_version(text: str) -> str | None:
    match = re.search(r"release (\d+\.\d+)", text)
    return match.group(1) if match else None


def parse_gpu_archs(text: str) -> tuple[int, ...]:
    """`nvcc --list-gpu-arch` output → the numeric capabilities it can target."""
    return tuple(sorted({int(m) for m in re.findall(r"compute_(\d+)", text)}))


def parse_sm(text: str, supported: tuple[int, ...], nvcc_version: str) -> tuple[str, str]:
    """`--sm 86,89` → (CMAKE_CUDA_ARCHITECTURES, label for the build id). Raises UserError before any compiling."""
    archs: list[tuple[int, str]] = []
    for item in (part.strip() for part in text.split(",")):
        match = _SM.match(item)
        if not match:
            raise UserError(f"--sm {item!r} is not a CUDA compute capability; use e.g. 86, 8.6, 90a or native")
        number = int(match.group(1) + match.group(2))
        if supported and number not in supported:
            raise UserError(
                f"--sm {item}: nvcc {nvcc_version} cannot build compute capability {number} "
                f"(it builds {supported[0]}–{supported[-1]}); CUDA 13 dropped everything below 75"
            )
        archs.append((number, f"{number}{match.group(3)}"))
    names = [name for _, name in sorted(set(archs))]
    value = ";".join([f"{n}-real" for n in names[:-1]] + names[-1:])
    return value, "sm" + "_".join(names)


def visible_capabilities(environ: dict[str, str]) -> list[str]:
    """Compute capabilities of the GPUs CUDA would see here, e.g. ['9.0']; empty when none is visible."""
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return []
    smi = which("nvidia-smi")
    if smi is None:
        return []
    ran = proc.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], timeout=30)
    return (
        sorted({ln.strip() for ln in ran.output.splitlines() if re.match(r"^\d+\.\d+$", ln.strip())}) if ran.ok else []
    )


def asks_the_gpus(text: str | None) -> bool:
    """No --sm, or --sm native: the answer depends on the GPUs present, not only on files."""
    return text is None or text.strip() == "native"


def resolve_sm(text: str | None, environ: dict[str, str]) -> tuple[str, str]:
    """`--sm` (or its absence, or 'native') → concrete capabilities, so the build id says what was built.

    Upstream's own 'native' fails late on a host without a GPU ("compute_No CUDA devices found").
    """
    nvcc = find_nvcc(environ)
    if nvcc is None:
        raise UserError("--sm needs nvcc: install the CUDA toolkit and set CUDA_HOME")
    version = parse_nvcc_version(proc.run([nvcc, "--version"], timeout=60).output) or "?"
    if asks_the_gpus(text):
        capabilities = visible_capabilities(environ)
        if not capabilities:
            raise UserError(
                "no NVIDIA GPU is visible here to build for natively (nvidia-smi found none); "
                "name the compute capability instead, e.g. --sm 86"
            )
        text = ",".join(capabilities)
    return parse_sm(text, supported_archs(nvcc, version if version != "?" else None), version)


def supported_archs(nvcc: str, version: str | None) -> tuple[int, ...]:
    ran = proc.run([nvcc, "--list-gpu-arch"], timeout=60)
    archs = parse_gpu_archs(ran.output) if ran.ok else ()
    if archs or version is None:
        return archs
    return archs_of_major(int(version.split(".")[0]))


def archs_of_major(major: int) -> tuple[int, ...]:
    """The capabilities a CUDA toolkit of this major version can build (from the lowest it keeps)."""
    lowest = _LOWEST_BY_MAJOR.get(major, 0)
    return tuple(n for n in range(lowest, 130) if n % 10 in (0, 2, 3, 5, 6, 7, 9))


def _host_compiler_check(nvcc: str, cxx: str | None) -> Check:
    """nvcc refuses host compilers newer than it knows: the only proof is compiling something."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.cu"
        probe.write_text("__global__ void k(int *x) { *x = 1; }\n")
        command = [nvcc, "-c", str(probe), "-o", str(Path(tmp) / "probe.o")] + (["-ccbin", cxx] if cxx else [])
        ran = proc.run(command, timeout=120)
    text = ran.output
    if ran.ok:
        return Check(NAME, "nvcc host compiler", True, cxx or "default")
    reason = next((ln.strip() for ln in text.splitlines() if "error" in ln.lower()), text.strip()[-200:])
    return Check(
        NAME,
        "nvcc host compiler",
        False,
        reason,
        "install a gcc that this nvcc supports and set CUDAHOSTCXX=/usr/bin/g++-N",
    )


def _cublas_check(found: Toolkit) -> Check:
    """ggml-cuda links cuBLAS; a toolkit without it fails configure with 'CUDA::cublas ... not found'."""
    ok = bool(found.cublas_libraries and found.cublas_headers)
    return Check(
        NAME,
        "cuBLAS",
        ok,
        str(found.cublas_libraries[0].parent) if ok else f"not in {found.root}",
        "buildmgr toolchain add cuda (a whole toolkit, cuBLAS included, from NVIDIA's PyPI wheels), or install "
        "cuBLAS into this one (NVIDIA's libcublas-dev-<version> package)",
    )


def inspect(host: Host, found: Toolkit, deep: bool) -> Report:
    nvcc = found.nvcc
    if nvcc is None:
        return Report(
            (
                Check(
                    NAME,
                    "nvcc",
                    False,
                    "not found",
                    "buildmgr toolchain add cuda (NVIDIA's PyPI wheels), or install the CUDA toolkit "
                    "(apt-get install nvidia-cuda-toolkit, or NVIDIA's cuda-toolkit package) and set CUDA_HOME",
                ),
            )
        )
    text = proc.run([nvcc, "--version"], timeout=60).output
    version = parse_nvcc_version(text)
    checks = [
        Check(
            NAME,
            "nvcc",
            version is not None,
            f"{version} at {nvcc}" if version else text[-200:],
            "nvcc --version did not answer; check the CUDA installation",
        )
    ]
    checks.append(_cublas_check(found))
    if deep and version:
        checks.append(_host_compiler_check(nvcc, found.host_compiler))
    return Report(tuple(checks), host_defines={"CMAKE_CUDA_COMPILER": nvcc}, versions={"nvcc": version or "?"})


# --- the GPU code in a build, and what a host's GPUs make of it ----------------------------------------------------

_FATBIN_MAGIC = 0xBA55ED50
_FATBIN_PTX, _FATBIN_ELF = 1, 2


def fatbin_archs(data: bytes) -> tuple[set[int], set[int]]:
    """(SASS archs, PTX archs) of every fat binary container in a `.nv_fatbin` section.

    Layout (as cuobjdump reads it): a 16-byte header (magic, version, header size, size of what follows), then
    entries of `kind u16, version u16, header_size u32, payload_size u64, …, arch u32 at +28`, each followed by its
    payload.
    """
    sass: set[int] = set()
    ptx: set[int] = set()
    offset = 0
    while offset + 16 <= len(data):
        magic, _, header_size, size = struct.unpack_from("<IHHQ", data, offset)
        if magic != _FATBIN_MAGIC:
            offset += 8  # containers are 8-byte aligned; padding between them is skipped
            continue
        entry, end = offset + header_size, min(offset + header_size + size, len(data))
        while entry + 32 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if entry_header == 0:
                break
            {_FATBIN_ELF: sass, _FATBIN_PTX: ptx}.get(kind, set()).add(arch)
            entry += entry_header + payload
        offset = max(end, offset + 16)
        offset += -offset % 8
    return sass, ptx


def fatbin_codes(data: bytes) -> set[str]:
    """`sm_*` (SASS) and `compute_*` (PTX) in a `.nv_fatbin` section."""
    sass, ptx = fatbin_archs(data)
    return {f"sm_{a}" for a in sass} | {f"compute_{a}" for a in ptx}


def _code_order(code: str) -> tuple[bool, int]:
    """`sm_90` → (False, 90): SASS first, then PTX (`compute_90` → (True, 90)), each by capability."""
    kind, number = code.split("_", 1)
    return kind == "compute", int(number.rstrip("af"))


def kernel_findings(codes: Sequence[str], capabilities: list[str]) -> list[Finding]:
    """A finding per GPU capability that this build's code (`sm_*` SASS, `compute_*` PTX) has no machine code for.

    SASS for sm_XY runs on X.Y and newer minors of the same major; PTX for compute_XY is JIT-compiled by the driver
    on any GPU of at least X.Y; with neither, CUDA fails with "no kernel image is available".
    """
    parsed = [_code_order(code) for code in codes]
    have_sass = [number for is_ptx, number in parsed if not is_ptx]
    have_ptx = [number for is_ptx, number in parsed if is_ptx]
    findings = []
    for capability in capabilities:
        major, minor = (int(part) for part in capability.split("."))
        number = major * 10 + minor
        if any(s // 10 == major and s <= number for s in have_sass):
            continue
        jit = [p for p in have_ptx if p <= number]
        built = ", ".join(codes) or "no CUDA code"
        if jit:
            findings.append(
                Finding(
                    "warning",
                    NAME,
                    f"a GPU of compute capability {capability} has no sm_{number} code in this build ({built}); "
                    f"the driver will JIT-compile compute_{max(jit)} PTX at first use (a slow first start, cached in "
                    f"~/.nv/ComputeCache)",
                    f"build with --sm {number} for native code",
                )
            )
        else:
            findings.append(
                Finding(
                    "error",
                    NAME,
                    f"a GPU of compute capability {capability} can run nothing in this build ({built}): CUDA "
                    f"would fail with 'no kernel image is available'",
                    f"build with --sm {number}",
                )
            )
    return findings


DEVICE_CODE = DeviceCode(
    ".nv_fatbin",
    fatbin_codes,
    _code_order,
    "cuda",
    lambda codes, environ: kernel_findings(codes, visible_capabilities(environ)),
    ("cuda_sass", "cuda_ptx"),
)


# --- the --sm option ---------------------------------------------------------------------------------------------


def resolve_arch(text: str | None, host: Host, memo: Memo) -> tuple[str, str]:
    """`--sm` → CMAKE_CUDA_ARCHITECTURES. A named --sm is remembered with nvcc's stamps; none or 'native' asks the
    GPUs every time."""
    ask = functools.partial(resolve_sm, text, host.environ)
    if asks_the_gpus(text):
        return ask()
    return memo.recall(["--sm", text, stamps(locate(host).inputs)], ask, list, tuple)


def ci_label(text: str) -> str:
    """`--sm` for the workflow's CUDA image, which has no GPU to build natively for."""
    if text.strip() == "native":
        raise UserError("--sm native means this host's GPUs, and a CI runner has none; name them, e.g. --sm 86")
    major = int(CI_IMAGE_VERSION.split(".")[0])
    return parse_sm(text, archs_of_major(major), CI_IMAGE_VERSION)[1]


def sm_from_defines(defines: Mapping[str, str]) -> str | None:
    """CMAKE_CUDA_ARCHITECTURES=86-real;89 → `--sm 86,89` (the inverse of parse_sm)."""
    value = defines.get("CMAKE_CUDA_ARCHITECTURES")
    return ",".join(a.removesuffix("-real") for a in value.split(";")) if value else None


ARCH = ArchOption(
    flag="--sm",
    define="CMAKE_CUDA_ARCHITECTURES",
    owns=("CMAKE_CUDA_ARCHITECTURES",),
    language="CUDA",
    example="buildmgr build cuda --sm 86",
    help="CUDA compute capabilities, e.g. 86 or 86,89 or 8.6 or native (default: this host's GPUs)",
    matrix_help="CUDA capabilities of one variant, e.g. 86,89 (repeat for more)",
    resolve=resolve_arch,
    ci_label=ci_label,
    ci_missing="it has CUDA: name the capabilities with --sm (a CI runner has no GPU to build natively for)",
    from_defines=sm_from_defines,
)


# --- nvidia-smi's view of the GPUs --------------------------------------------------------------------------------


class NvidiaGpu(NamedTuple):
    index: int
    name: str
    uuid: str  # without the GPU- prefix, lower case: comparable with vulkaninfo's deviceUUID
    pci_bus_id: str
    memory_total_mib: int | None
    driver: str | None = None


def parse_nvidia_smi_csv(text: str) -> list[NvidiaGpu]:
    """`nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total[,driver_version] --format=csv[,noheader]`."""
    import csv  # here, not at the top: a no-op build imports this module and reads no capture

    from buildmgr.devices import normalize_pci

    gpus = []
    for row in csv.reader(text.splitlines()):  # any line ending, a stray \r included
        cells = [c.strip() for c in row]
        if len(cells) < 4 or not cells[0].isdigit():
            continue  # the header, or noise
        memory = re.match(r"(\d+)", cells[4]) if len(cells) > 4 else None
        gpus.append(
            NvidiaGpu(
                int(cells[0]),
                cells[1],
                cells[2].removeprefix("GPU-").lower(),
                normalize_pci(cells[3]) or cells[3].lower(),
                int(memory.group(1)) if memory else None,
                cells[5] if len(cells) > 5 else None,
            )
        )
    return gpus


def match_nvidia_smi(devices: list[Device], nvidia: list[NvidiaGpu], notes: list[str] | None = None) -> list[Device]:
    """nvidia-smi's UUID and PCI id for the devices that are its GPUs: any backend's device by PCI id; a CUDA device
    without one by name where the match is one to one, or when it is the only CUDA device and the only GPU."""
    by_pci = {g.pci_bus_id: g for g in nvidia}
    unplaced = [d for d in devices if d.backend == NAME and d.pci_bus_id is None]
    by_name = one_to_one(unplaced, nvidia, lambda d, g: g.name == d.description)
    if not by_name and len(nvidia) == 1 and len(unplaced) == 1 == sum(d.backend == NAME for d in devices):
        by_name = {unplaced[0].name: nvidia[0]}
    matched = []
    for device in devices:
        gpu = by_pci.get(device.pci_bus_id) if device.pci_bus_id else by_name.get(device.name)
        if gpu is not None:
            device = dataclasses.replace(device, uuid=gpu.uuid, pci_bus_id=device.pci_bus_id or gpu.pci_bus_id)
        matched.append(device)
    return matched


def _host_json(gpus: list[NvidiaGpu] | None) -> dict[str, object]:
    gpus = gpus or []
    return {"drivers": {"nvidia": gpus[0].driver if gpus else None}, "nvidia_gpus": [g._asdict() for g in gpus]}


# One nvidia-smi call: the columns parse_nvidia_smi_csv reads, then the driver version.
CAPTURE = Capture(
    command=(
        "nvidia-smi",
        "--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version",
        "--format=csv,noheader",
    ),
    option="--nvidia-smi",
    help="with --parse: a captured 'nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv'",
    parse=parse_nvidia_smi_csv,
    match=match_nvidia_smi,
    host_json=_host_json,
    wanted=lambda builds: True,
)


# --- NVML: the GPUs' engines during a benchmark ---------------------------------------------------------------------

# nvml.h's clocks-event reasons that hold the clocks down under load (idle, application clocks, sync boost and the
# display clock are left out: they are not a slowdown of a busy GPU).
SLOWDOWNS = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}
# ggml-cuda page-locks host buffers (CUDA_Host) unless this is set: on a shared host that memory is not swappable.
PINNING_GUARD = ("GGML_CUDA_NO_PINNED", "1")


def nvml_reading(raw: Mapping[str, object]) -> EngineReading:
    """One GPU's raw NVML values (what `NvmlEngines.raw` reads; recorded readings replay through here) as a reading."""
    from buildmgr.devices import normalize_pci

    def number(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    used, power, reasons = number("memory_used_bytes"), number("power_mw"), raw.get("clocks_event_reasons")
    clock = number("sm_clock_mhz")
    return EngineReading(
        normalize_pci(str(raw.get("bus_id", ""))) or str(raw.get("bus_id", "")).lower(),
        number("gpu_util"),
        int(used) >> 20 if used is not None else None,
        int(clock) if clock is not None else None,
        power / 1000 if power is not None else None,
        tuple(name for bit, name in SLOWDOWNS.items() if isinstance(reasons, int) and reasons & bit),
    )


def power_limit_note(raw: Mapping[str, object]) -> str | None:
    limit, default = raw.get("power_limit_mw"), raw.get("power_default_limit_mw")
    if isinstance(limit, int) and isinstance(default, int) and limit < default:
        return f"GPU {raw.get('bus_id')}: power limit {limit / 1000:.0f} W is below its default {default / 1000:.0f} W"
    return None


class NvmlEngines:
    """NVIDIA's management library (nvidia-ml-py), the way NVIDIA recommends over parsing nvidia-smi."""

    def __init__(self, nvml) -> None:
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]

    @classmethod
    def open(cls) -> NvmlEngines | None:
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # no driver or no libnvidia-ml here
            return None
        return cls(pynvml)

    def _try(self, call, *args):
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def raw(self, handle) -> dict[str, object]:
        nvml = self.nvml
        pci = self._try(nvml.nvmlDeviceGetPciInfo, handle)
        bus = getattr(pci, "busId", b"") if pci is not None else b""
        util = self._try(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = self._try(nvml.nvmlDeviceGetMemoryInfo, handle)
        # renamed from "throttle" to "clocks event" reasons in NVML 12.x; older bindings have only the old name
        reasons_call = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return {
            "bus_id": bus.decode() if isinstance(bus, bytes) else str(bus),
            "gpu_util": util.gpu if util is not None else None,
            "memory_used_bytes": memory.used if memory is not None else None,
            "sm_clock_mhz": self._try(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            "power_mw": self._try(nvml.nvmlDeviceGetPowerUsage, handle),
            "clocks_event_reasons": self._try(reasons_call, handle),
            "power_limit_mw": self._try(nvml.nvmlDeviceGetPowerManagementLimit, handle),
            "power_default_limit_mw": self._try(nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle),
        }

    def read(self) -> list[EngineReading]:
        return [nvml_reading(self.raw(h)) for h in self.handles]

    def users(self) -> list[tuple[int, str]]:
        found: dict[int, str] = {}
        for handle in self.handles:
            for call in (
                self.nvml.nvmlDeviceGetComputeRunningProcesses,
                self.nvml.nvmlDeviceGetGraphicsRunningProcesses,
            ):
                for process in self._try(call, handle) or []:
                    found[process.pid] = process_name(process.pid)
        return sorted(found.items())

    def limits(self) -> list[str]:
        return [note for h in self.handles if (note := power_limit_note(self.raw(h)))]

    def close(self) -> None:
        self._try(self.nvml.nvmlShutdown)


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every CUDA device"
    if not captures.get(NAME):
        return "no NVIDIA GPU visible (nvidia-smi found none)"
    return "no device found"


# ggml-cuda's start-up lines, for CUDA and for its HIP and MUSA builds (the header names which):
# "ggml_cuda_init: found 2 CUDA devices (Total VRAM: …):" then "  Device 0: NAME, compute capability 8.6, VMM: yes[, VRAM:
# N MiB]" (ROCm: "NAME, gfx1151 (0x1151), …"); before 2024 the header was "ggml_init_cublas: found …".
LOG_DEVICES = (
    LogDevice(
        "ggml_cuda_init lines",
        r"(?<![\w-])Device (?P<index>\d+): (?P<description>[^,]+?), (?:compute capability \d+\.\d+|(?P<detail>gfx\w+) \(0x[0-9a-fA-F]+\))"
        r"(?:,.*?VRAM: (?P<total>\d+) MiB)?",
        NAME,
        after=r"ggml_(?:cuda_init|init_cublas): found \d+ (?P<backend>\S+) devices",
    ),
)
LOG_EMPTY = (r"ggml_cuda_init: failed to initialize \S+: .*", r"ggml_(?:cuda_init|init_cublas): no \S+ devices found")
NAME_ROLES = (
    NameRole(
        r"\b(?:Orin|Xavier|Tegra|GB10)\b",
        "igpu",
        "Jetson (Orin, Xavier) and GB10 GPUs share the CPU's memory (CUDA types them integrated)",
        "https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/",
    ),
)

# --- toolchains from NVIDIA's PyPI wheels (`buildmgr toolchain add cuda`) -------------------------------------------
# The `cuda-toolkit` meta package pins consistent wheel versions per release; its extras choose the parts. CUDA 13's
# wheels put everything under nvidia/cu13/, CUDA 12's one folder per wheel (nvidia/cuda_nvcc, nvidia/cublas …).
_WHEEL_PARTS = ("nvcc", "cudart", "cublas", "cccl", "crt", "nvvm")
_RUNTIME_PARTS = ("cudart", "cublas")
_NOT_TOOLKIT = {"__init__.py", "__pycache__"}  # what makes the wheels' folders Python packages


def _merge(source: Path, root: Path) -> None:
    """Move every file under `source` to the same place under `root`; a file two wheels both ship must be the same."""
    import filecmp

    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if _NOT_TOOLKIT & set(relative.parts) or (path.is_dir() and not path.is_symlink()):
            continue
        target = root / relative
        if target.exists() or target.is_symlink():
            if not filecmp.cmp(path, target, shallow=False):
                raise UserError(f"two CUDA wheels ship different files at {relative}; report it to buildmgr")
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        path.rename(target)


def _wheel_release(root: Path) -> str:
    """MAJOR.MINOR of the CUDA runtime wheel that went in (nvidia_cuda_runtime[_cu12]-13.0.96.dist-info → 13.0)."""
    for info in sorted((root / "dist-info").glob("nvidia_cuda_runtime*-*.dist-info")):
        found = re.search(r"-(\d+)\.(\d+)\.", info.name)
        if found:
            return f"{found.group(1)}.{found.group(2)}"
    raise UserError("the wheels pip installed have no CUDA runtime (nvidia-cuda-runtime); report it to buildmgr")


def driver_api_names(preprocessed: str) -> list[str]:
    """The driver API functions a cuda.h declares, as object files reference them: after its macros renamed many
    (cuMemAlloc → cuMemAlloc_v2, and the _ptds/_ptsz forms under a per-thread default stream)."""
    return sorted(set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", preprocessed)))


def _driver_stub(root: Path, cc: str | None) -> None:
    """lib/stubs/libcuda.so, which the wheels lack: every driver API function as an empty one, under the driver's
    soname, so that executables link (a library with no symbols links shared libraries only). Link time only: it is
    never on a run-time path; the driver's own libcuda.so.1 is what runs."""
    header = root / "include" / "cuda.h"
    if cc is None:
        raise UserError("making the CUDA driver stub needs a C compiler: apt-get install build-essential")
    names: set[str] = set()
    for extra in ([], ["-DCUDA_API_PER_THREAD_DEFAULT_STREAM"]):
        ran = proc.run([cc, "-E", "-P", *extra, "-I", str(root / "include"), str(header)], timeout=120)
        if not ran.ok:
            raise UserError(f"the C compiler could not read {header}: {ran.failure()}")
        names.update(driver_api_names(ran.stdout))
    stubs = root / "lib" / "stubs"
    stubs.mkdir(parents=True)
    source = stubs / "libcuda-stub.c"
    source.write_text("".join(f"void {name}(void) {{}}\n" for name in sorted(names)), encoding="ascii")
    ran = proc.run(
        [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stubs / "libcuda.so"), str(source)], timeout=300
    )
    source.unlink()
    if not ran.ok:
        raise UserError(f"the CUDA driver stub did not link: {ran.failure()}")


def _lay_out(site: Path, root: Path, cc: str | None, *, stub: bool) -> str:
    """The wheels pip installed into `site` → a toolkit at `root` that CMake's CUDA language and FindCUDAToolkit
    accept: bin/nvcc, include/, lib/ (and lib64 → lib) with unversioned library links, dist-info/ of every wheel.
    Its version is the release (13.0); the runtime alone goes by its major (13), as its sonames do
    (libcudart.so.13): a newer minor runs what an older one built."""
    for folder in sorted((site / "nvidia").iterdir()):
        if folder.is_dir() and folder.name not in _NOT_TOOLKIT:
            _merge(folder, root)
    (root / "dist-info").mkdir()
    for info in site.glob("*.dist-info"):
        info.rename(root / "dist-info" / info.name)
    lib = root / "lib"
    for library in sorted(lib.glob("lib*.so.*")):
        plain = lib / (library.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(library.name)
    (root / "lib64").symlink_to("lib")
    if stub:
        if not (root / "bin" / "nvcc").is_file():
            raise UserError("the CUDA wheels pip installed have no bin/nvcc, so they cannot build; nothing was added")
        _driver_stub(root, cc)
        return _wheel_release(root)
    return _wheel_release(root).split(".")[0]


def _toolkit_environ(root: Path) -> dict[str, str]:
    return dict.fromkeys(_TOOLKIT_ROOTS, str(root))


KITS = (
    base.Kit(
        "cuda",
        NAME,
        "the CUDA toolkit from NVIDIA's PyPI wheels: nvcc, the runtime, cuBLAS, CCCL, plus a link-time driver stub",
        # measured: nvidia-cuda-nvcc-cu12 12.8.93 ships ptxas and libNVVM, not nvcc
        base.PipSource(
            "cuda-toolkit",
            _WHEEL_PARTS,
            (13,),
            "13.0",
            "NVIDIA",
            refused={12: "NVIDIA's CUDA 12 wheels have no nvcc (nvidia-cuda-nvcc-cu12 ships ptxas and libNVVM only)"},
        ),
        lambda site, root, cc: _lay_out(site, root, cc, stub=True),
        _toolkit_environ,
        runpath="lib",
        libraries=("libcudart.so", "libcublas.so", "libcublasLt.so"),
        runtime="cuda-runtime",
    ),
    base.Kit(
        "cuda-runtime",
        NAME,
        "the CUDA runtime and cuBLAS libraries alone, for running builds made with `toolchain add cuda`",
        # a host that runs CUDA programs from Python often has these two wheels already
        base.PipSource(
            "cuda-toolkit",
            _RUNTIME_PARTS,
            (12, 13),
            "13.0",
            "NVIDIA",
            ("nvidia-cuda-runtime", "nvidia-cublas"),
            wheel_suffix="-cu{major}",
            wheel_folder="nvidia",
        ),
        lambda site, root, cc: _lay_out(site, root, cc, stub=False),
        _toolkit_environ,
        runpath="lib",
        libraries=("libcudart.so", "libcublas.so", "libcublasLt.so"),
        builds=False,
    ),
)

EXTRAS = Extras(
    languages=("CUDA",),
    arch=ARCH,
    capture=CAPTURE,
    device_code=DEVICE_CODE,
    build_failures=BUILD_FAILURES,
    splits=SPLITS,
    ci_runner=("ubuntu-24.04", CI_CONTAINER),
    engines=NvmlEngines.open,
    pinning_guard=PINNING_GUARD,
    log_devices=LOG_DEVICES,
    log_empty=LOG_EMPTY,
    name_roles=NAME_ROLES,
    kits=KITS,
)
