"""SYCL: Intel GPUs through oneAPI's icx/icpx."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from buildmgr import proc
from buildmgr.backends.base import Extras, Host, Report, which
from buildmgr.findings import Check

if TYPE_CHECKING:
    from buildmgr.devices import Captures

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
EXTRAS = Extras()  # no arch option, vendor tool, GPU code or known failures of its own
FIX = "install Intel oneAPI Base Toolkit and `source /opt/intel/oneapi/setvars.sh` first"


class OneApi(NamedTuple):
    icx: str | None
    icpx: str | None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files behind what inspect() finds: the oneAPI compilers."""
        return tuple(path for path in (self.icx, self.icpx) if path)


def locate(host: Host) -> OneApi:
    bindir = f"{host.environ.get('ONEAPI_ROOT', '/opt/intel/oneapi')}/compiler/latest/bin"
    return OneApi(which("icx", bindir), which("icpx", bindir))


def inspect(host: Host, found: OneApi, deep: bool) -> Report:
    icx, icpx = found.icx, found.icpx
    if not (icx and icpx):
        return Report((Check(NAME, "icx/icpx (oneAPI DPC++)", False, "not found", FIX),))
    text = proc.run([icpx, "--version"], timeout=60).output
    version = text.splitlines()[0] if text else "?"
    return Report(
        (Check(NAME, "icx/icpx (oneAPI DPC++)", True, version),),
        host_defines={"CMAKE_C_COMPILER": icx, "CMAKE_CXX_COMPILER": icpx},
        versions={"icpx": version},
    )


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    return "no device found"
