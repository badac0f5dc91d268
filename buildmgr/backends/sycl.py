"""SYCL: Intel GPUs through oneAPI's icx/icpx."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from buildmgr import proc
from buildmgr.backends.base import Extras, Host, NameRole, Report, which
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
# Intel's integrated GPUs by name, under every driver: Windows ("Intel(R) UHD Graphics 770", "Intel(R) Arc(TM) 140V
# GPU"), Mesa ANV ("Intel(R) UHD Graphics 630 (CFL GT2)", "Intel(R) Graphics (ADL GT2)", "… (MTL)") and SYCL. Discrete
# cards are "Intel(R) Arc(TM) A770 Graphics (DG2)", B580 (BMG): never matched.
NAME_ROLES = (
    NameRole(
        r"Intel\(R\) (?:U?HD|Iris\(R\)(?: Xe| Plus| Pro)?) Graphics|Intel\(R\) Graphics\b",
        "igpu",
        "Intel UHD, HD, Iris and unnamed Intel Graphics are integrated",
        "https://gitlab.freedesktop.org/mesa/mesa/-/blob/main/include/pci_ids/iris_pci_ids.h",
    ),
    NameRole(
        r"Intel\(R\) Arc\((?:TM|tm)\) (?:Graphics|1[34]0V)\b",
        "igpu",
        "Intel Arc Graphics without a model number, and Arc 130V/140V, are Core Ultra integrated GPUs",
        "https://www.intel.com/content/www/us/en/products/details/discrete-gpus/arc.html",
    ),
    NameRole(
        r"\((?:[A-Z]{3} GT\d|MTL|LNL|ARL|PTL)\)",
        "igpu",
        "Mesa's codename (GT1–GT3, MTL, LNL, ARL, PTL) is an integrated Intel GPU's",
        "https://gitlab.freedesktop.org/mesa/mesa/-/blob/main/include/pci_ids/iris_pci_ids.h",
    ),
)
EXTRAS = Extras(name_roles=NAME_ROLES)  # no arch option, vendor tool, GPU code or known failures of its own
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
