"""Backends buildmgr does not build, whose devices still appear in the logs people paste: OpenCL (Qualcomm Adreno,
Arm Mali). Only what reading those logs needs; they are not in `all_modules`, so no recipe, check or matrix names them."""

from __future__ import annotations

from buildmgr.backends.base import Extras, LogDevice, NameRole

# ggml-opencl names every device GPUOpenCL (no index) and describes it by the OpenCL device name; its start-up line
# adds the version: "ggml_opencl: device: 'QUALCOMM Adreno(TM) 830 (OpenCL 3.0 Adreno(TM) 830)'" (2025: "selecting").
OPENCL = "GPUOpenCL"
LOG_DEVICES = (
    LogDevice(
        "ggml_opencl lines", r"ggml_opencl: (?:device|selecting device|default device): '(?P<description>.+)'", OPENCL
    ),
)
NAME_ROLES = (
    NameRole(
        r"\bAdreno\b",
        "igpu",
        "Adreno is the GPU of Qualcomm Snapdragon SoCs",
        "https://docs.qualcomm.com/bundle/publicresource/topics/80-78185-2/overview.html",
    ),
    NameRole(r"\bMali-", "igpu", "Mali is Arm's SoC GPU", "https://developer.arm.com/Processors#q=Mali"),
)
EXTRAS = Extras(log_devices=LOG_DEVICES, name_roles=NAME_ROLES)
