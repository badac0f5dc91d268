"""The RPC backend: an add-on that offloads to rpc-server on other hosts; nothing to check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from buildmgr.backends.base import Extras, Host, Nothing, Report

if TYPE_CHECKING:
    from buildmgr.devices import Captures

NAME = "RPC"
GGML_TARGET = "ggml-rpc"
MIN_CMAKE = "3.14"
GIB_PER_JOB = 2.0
# Variables that hide, reorder or rename this backend's devices: recorded with every probe.
ENUMERATION_ENV: tuple[str, ...] = ()
RUNTIME_LIBRARIES: dict[str, str] = {}
# Where the artifacts workflow can build it, and the provisioning step it needs ("" none).
SYSTEMS = ("linux", "macos")
CI_SETUP = ""
DRIVER_LIBRARY = ""
EXTRAS = Extras()  # no arch option, vendor tool, GPU code or known failures of its own


def locate(host: Host) -> Nothing:
    return Nothing()


def inspect(host: Host, found: Nothing, deep: bool) -> Report:
    return Report()


def why_absent(environ: Mapping[str, str], captures: Captures) -> str | None:
    return None  # its devices are the rpc-servers a run names (--rpc), never one of this host
