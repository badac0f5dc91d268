"""The RPC backend: an add-on that offloads to ggml-rpc-server on other hosts (its program and protocol: `server`);
nothing to check."""

from __future__ import annotations

from collections.abc import Mapping

from buildmgr.backend_spec import Backend, Names, RemoteServer, lazy

NAMES = Names("RPC", "rpc", "RPC", "GGML_RPC", "ggml-rpc")


def why_absent(environ: Mapping[str, str], captures: object) -> str | None:
    return None  # its devices are the rpc-servers a run names (--rpc), never one of this host


SERVER = RemoteServer(
    program="ggml-rpc-server",  # tools/rpc/CMakeLists.txt's target
    default_port=50052,  # rpc-server.cpp's default, and the port llama.cpp's docs use
    header="include/ggml-rpc.h",
    command=lazy(f"{__name__}.server", "command"),
    protocol=lazy(f"{__name__}.server", "protocol"),
    started=lazy(f"{__name__}.server", "started"),
    failure=lazy(f"{__name__}.server", "failure"),
    client_lines=("Accepted client connection", "Client connection closed"),  # it serves one client at a time
    client_flag="--rpc",
    add_server="ggml_backend_rpc_add_server",
    refused=lazy(f"{__name__}.server", "refused"),
    claims_every_op=True,  # ggml-rpc.cpp's supports_op at the pin: "TODO: call the remote backend", true for all
)
BACKEND = Backend(NAMES, order=60, systems=("linux", "macos"), why_absent=why_absent, remote=SERVER)
