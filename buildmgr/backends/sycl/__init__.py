"""SYCL: Intel GPUs through oneAPI's icx/icpx."""

from __future__ import annotations

from typing import NamedTuple

from buildmgr.backend_spec import Backend, Host, LogDevice, NameRole, Names, Report
from buildmgr.core import proc
from buildmgr.core.device_records import Role
from buildmgr.core.findings import Check

NAMES = Names("SYCL", "sycl", "SYCL", "GGML_SYCL", "ggml-sycl")
FIX = "install Intel oneAPI Base Toolkit and `source /opt/intel/oneapi/setvars.sh` first"
# Intel's integrated GPUs by name, under every driver: Windows ("Intel(R) UHD Graphics 770", "Intel(R) Arc(TM) 140V
# GPU"), Mesa ANV ("Intel(R) UHD Graphics 630 (CFL GT2)", "Intel(R) Graphics (ADL GT2)", "… (MTL)") and SYCL. Mesa names
# discrete cards with the same words ("Intel(R) Graphics (BMG G21)", "(DG2)"): only the codename tells them apart, so
# a bare "Intel(R) Graphics" (SYCL's "Intel(R) Graphics [0xe20b]" is a B580) is no iGPU by name, and no rule matches
# a discrete codename (BMG, DG1, DG2: Battlemage, Iris Xe MAX, Alchemist).
_NOT_DISCRETE = r"^(?!.*\((?:BMG|DG[12])\b)"
_INTEGRATED = r"TGL|ADL|RPL|RKL|MTL|LNL|ARL|PTL|JSL|EHL|ICL|CML|CFL|KBL|AML|WHL|SKL|GLK|APL|BXT|BDW|HSW|BYT|CHV|IVB|SNB"
NAME_ROLES = (
    NameRole(
        _NOT_DISCRETE + r".*Intel\(R\) (?:U?HD|Iris\(R\)(?: Xe| Plus| Pro)?) Graphics",
        Role.IGPU,
        "Intel UHD, HD and Iris Graphics are integrated",
        "https://gitlab.freedesktop.org/mesa/mesa/-/blob/main/include/pci_ids/iris_pci_ids.h",
    ),
    NameRole(
        _NOT_DISCRETE + r".*Intel\(R\) Arc\((?:TM|tm)\) (?:Graphics|1[34]0V)\b",
        Role.IGPU,
        "Intel Arc Graphics without a model number, and Arc 130V/140V, are Core Ultra integrated GPUs",
        "https://www.intel.com/content/www/us/en/products/details/discrete-gpus/arc.html",
    ),
    NameRole(
        r"\((?:" + _INTEGRATED + r")(?:-[A-Z])?(?: GT\d)?\)",
        Role.IGPU,
        "Mesa's codename (TGL, ADL, RPL, RKL, MTL, LNL, ARL, JSL …) is an integrated Intel GPU's",
        "https://gitlab.freedesktop.org/mesa/mesa/-/blob/main/include/pci_ids/iris_pci_ids.h",
    ),
)

# ggml-sycl's device table (print_device_detail): "| 0| [level_zero:gpu:0]|  Intel Iris Xe Graphics|    1.5|     96|
# 512|   32| 31604M|  1.3.30714|", ID i is SYCLi; the name has "(R)"/"(TM)" removed, global memory is in 10^6 bytes
# ("%6luM" of global_mem_size / 1000000). Older builds print the header as "found N SYCL devices:".
_TABLE_ROW = (
    r"\|\s*(?P<index>\d+)\|\s*\[(?P<api>[\w-]+):(?P<type>\w+):\d+\]\|\s*(?P<description>[^|]*?)\s*\|[^|]*\|\s*\d+\|"
    r"\s*\d+\|\s*\d+\|\s*(?P<total_m>\d+)M\|"
)
LOG_DEVICES = (
    LogDevice(
        "SYCL device table",
        _TABLE_ROW,
        NAMES.device,
        # the table's device type: a CPU is one whatever its name ("[opencl:cpu:0]")
        role=("type", "cpu", Role.CPU, "its SYCL device table row says cpu"),
        header=r"(?i:found) \d+ SYCL devices:",
        formats=(
            r"|%2d|%19s|%39s|%7s|%7d|%8d|%5d|%6luM|%21s|\n",
            r"Found %d SYCL devices:\n",
        ),
    ),
    # ggml_backend_sycl_set_single_device_mode: "Using device 0 (Intel(R) Arc(TM) A770 Graphics) as main device"
    LogDevice(
        "SYCL main device line",
        r"Using device (?P<index>\d+) \((?P<description>.+)\) as main device",
        NAMES.device,
        formats=(r"Using device %d (%s) as main device\n",),
    ),
)


class OneApi(NamedTuple):
    icx: str | None
    icpx: str | None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files behind what inspect() finds: the oneAPI compilers."""
        return tuple(path for path in (self.icx, self.icpx) if path)


def locate(host: Host) -> OneApi:
    bindir = f"{host.environ.get('ONEAPI_ROOT', '/opt/intel/oneapi')}/compiler/latest/bin"
    return OneApi(proc.which("icx", host.environ, bindir), proc.which("icpx", host.environ, bindir))


def inspect(host: Host, found: OneApi, deep: bool) -> Report:
    icx, icpx = found.icx, found.icpx
    if not (icx and icpx):
        return Report((Check(NAMES.device, "icx/icpx (oneAPI DPC++)", False, "not found", FIX),))
    text = proc.run([icpx, "--version"], timeout=60, env=dict(host.environ)).output
    version = text.splitlines()[0] if text else "?"
    return Report(
        (Check(NAMES.device, "icx/icpx (oneAPI DPC++)", True, version),),
        host_defines={"CMAKE_C_COMPILER": icx, "CMAKE_CXX_COMPILER": icpx},
        versions={"icpx": version},
    )


BACKEND = Backend(
    NAMES,
    order=40,
    gib_per_job=4.0,
    enumeration_env=("ONEAPI_DEVICE_SELECTOR",),
    runtime_libraries={
        "libsycl.so": "Intel oneAPI's SYCL runtime (source setvars.sh)",
        "libOpenCL.so": "an OpenCL ICD loader (apt ocl-icd-libopencl1)",
        "libmkl": "Intel oneMKL (oneAPI)",
    },
    ci=None,  # the artifacts workflow has no step that installs oneAPI yet
    needs_own_build=True,
    locate=locate,
    inspect=inspect,
    name_roles=NAME_ROLES,
    log_devices=LOG_DEVICES,
    # Ollama's oneapi runner was llama.cpp built with GGML_SYCL (its llm/generate/gen_linux.sh, 2024)
    library_names=("oneapi",),
)
