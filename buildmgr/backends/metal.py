"""Metal: Apple GPUs, macOS only."""

from __future__ import annotations

from buildmgr.backends import Check, Host, Report

NAME = "Metal"
GGML_TARGET = "ggml-metal"
MIN_CMAKE = "3.14"
GIB_PER_JOB = 2.0


def inspect(host: Host, deep: bool) -> Report:
    on_mac = host.system == "Darwin"
    return Report(
        (Check(NAME, "macOS", on_mac, host.system, "Metal builds only on macOS with Xcode's command line tools"),)
    )
