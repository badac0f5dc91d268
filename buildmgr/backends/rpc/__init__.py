"""The RPC backend: an add-on that offloads to rpc-server on other hosts; nothing to check."""

from __future__ import annotations

from collections.abc import Mapping

from buildmgr.backend_spec import Backend, Names

NAMES = Names("RPC", "rpc", "RPC", "GGML_RPC", "ggml-rpc")


def why_absent(environ: Mapping[str, str], captures: object) -> str | None:
    return None  # its devices are the rpc-servers a run names (--rpc), never one of this host


BACKEND = Backend(NAMES, order=60, systems=("linux", "macos"), why_absent=why_absent)
