"""OpenCL (Qualcomm Adreno, Arm Mali): a backend buildmgr does not build, whose devices still appear in the logs
people paste. Only what reading those logs needs (`built=False`: no recipe, check or matrix names it)."""

from __future__ import annotations

from buildmgr.backend_spec import Backend, LogDevice, NameRole, Names
from buildmgr.core.device_records import Role

# ggml-opencl names every device GPUOpenCL (no index) and describes it by the OpenCL device name; its start-up line
# adds the version: "ggml_opencl: device: 'QUALCOMM Adreno(TM) 830 (OpenCL 3.0 Adreno(TM) 830)'" (2025: "selecting").
NAMES = Names("GPUOpenCL", "opencl", "OpenCL", "GGML_OPENCL", "ggml-opencl")

BACKEND = Backend(
    NAMES,
    order=100,
    built=False,
    ci=None,
    log_devices=(
        # "ggml_opencl: device: 'NAME (VERSION)'": ggml's description is the NAME alone; the default device's memory
        # follows as "ggml_opencl: global mem size: N MB" (N in MiB: bytes/1024/1024)
        LogDevice(
            "ggml_opencl lines",
            r"ggml_opencl: (?:device|selecting device|default device): '(?P<description>.+?)(?: \(OpenCL\b[^']*\))?'",
            NAMES.device,
            more=(r"ggml_opencl: global mem size: (?P<total>\d+) MB",),
            formats=(
                r"\nggml_opencl: device: '%s (%s)'\n",
                r"ggml_opencl: default device: '%s (%s)'\n",
                r"ggml_opencl: global mem size: %zu MB\n",
            ),
        ),
    ),
    name_roles=(
        NameRole(
            r"\bAdreno\b",
            Role.IGPU,
            "Adreno is the GPU of Qualcomm Snapdragon SoCs",
            "https://docs.qualcomm.com/bundle/publicresource/topics/80-78185-2/overview.html",
        ),
        NameRole(r"\bMali-", Role.IGPU, "Mali is Arm's SoC GPU", "https://developer.arm.com/Processors#q=Mali"),
    ),
)
