"""SYCL: Intel GPUs through oneAPI's icx/icpx."""

from __future__ import annotations

from buildmgr import proc
from buildmgr.backends import Check, Host, Report, which

NAME = "SYCL"
GGML_TARGET = "ggml-sycl"
MIN_CMAKE = "3.14"
GIB_PER_JOB = 4.0
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = ("ONEAPI_DEVICE_SELECTOR",)
# Libraries the built files may need from the host (soname stem → where it comes from).
RUNTIME_LIBRARIES = {
    "libsycl.so": "Intel oneAPI's SYCL runtime (source setvars.sh)",
    "libOpenCL.so": "an OpenCL ICD loader (apt ocl-icd-libopencl1)",
    "libmkl": "Intel oneMKL (oneAPI)",
}
# Where the artifacts workflow can build it, and the provisioning step it needs (None: no step for it yet).
SYSTEMS = ("linux",)
CI_SETUP = None
DRIVER_LIBRARY = ""
ARCH = None
FIX = "install Intel oneAPI Base Toolkit and `source /opt/intel/oneapi/setvars.sh` first"


def _compilers(host: Host) -> tuple[str | None, str | None]:
    root = host.environ.get("ONEAPI_ROOT", "/opt/intel/oneapi")
    return which("icx", f"{root}/compiler/latest/bin"), which("icpx", f"{root}/compiler/latest/bin")


def inputs(host: Host) -> tuple[str, ...]:
    """The files behind what inspect() finds: the oneAPI compilers."""
    return tuple(path for path in _compilers(host) if path)


def inspect(host: Host, deep: bool) -> Report:
    icx, icpx = _compilers(host)
    if not (icx and icpx):
        return Report((Check(NAME, "icx/icpx (oneAPI DPC++)", False, "not found", FIX),))
    text = proc.run([icpx, "--version"], timeout=60).output
    version = text.splitlines()[0] if text else "?"
    return Report(
        (Check(NAME, "icx/icpx (oneAPI DPC++)", True, version),),
        host_defines={"CMAKE_C_COMPILER": icx, "CMAKE_CXX_COMPILER": icpx},
        versions={"icpx": version},
    )


def why_absent(environ: dict[str, str], vulkan: list, nvidia: list) -> str | None:
    return "no device found"
