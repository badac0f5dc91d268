"""`buildmgr rpc serve`: a build's ggml-rpc-server, for other hosts' llama.cpp to place work on this one."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from buildmgr.backends import remote
from buildmgr.cli import BUILD_HELP, command, network_timeout_s, render
from buildmgr.core.config import Context
from buildmgr.core.errors import UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers
    from buildmgr.fleet.serve import Serving


def register(sub: Subparsers, name: str) -> None:
    port = remote()[1].default_port
    p = command(
        sub,
        "rpc",
        rpc_command,
        "serve this host's devices to other hosts' llama.cpp (its RPC backend)",
        json=True,
        about="'serve' starts llama.cpp's own ggml-rpc-server from an installed build with the RPC backend (a recipe "
        "with +rpc) and keeps it in the foreground until Ctrl-C or SIGTERM stops it; another host's llama.cpp then "
        "names it with --rpc HOST:PORT and places work on its devices (RPC0, RPC1 … there). It listens on loopback "
        "unless --bind names another address with --allow-network: the protocol has no authentication, so reach it "
        "through an SSH tunnel or a private network. Once it listens it prints where, the protocol version, the "
        "devices it exposes and the build (--json: one object, for a script or a fleet file). 'ping' measures the link "
        "to a server as llama.cpp's own client crosses it: round trips, and a tensor written and read back.",
        example="buildmgr rpc serve cpu+rpc\nbuildmgr rpc serve cuda+rpc --device CUDA0 --port 50052 --cache --json\n"
        "buildmgr rpc ping cpu+rpc 192.168.1.20:50052\n"
        "ssh -N -L 50052:127.0.0.1:50052 gpu-host  # on a client: a tunnel to it",
    )
    p.add_argument(
        "action",
        choices=("serve", "ping"),
        help="serve: start ggml-rpc-server and keep it running; ping: what the link to a server costs from BUILD",
    )
    p.add_argument("build", help=BUILD_HELP)
    p.add_argument("server", nargs="?", metavar="HOST:PORT", help="ping: the server")
    p.add_argument("--size", type=int, default=64, metavar="MIB", help="ping: the tensor written and read (64 MiB)")
    p.add_argument(
        "--device",
        metavar="NAMES",
        help="the devices to expose, comma-separated as this build names them (default: every GPU, else the CPU)",
    )
    p.add_argument("--port", type=int, default=port, help=f"TCP port (default {port})")
    p.add_argument("--bind", default="127.0.0.1", metavar="ADDR", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--allow-network",
        action="store_true",
        help="allow --bind to name an address other hosts reach: anyone who reaches it can use the devices",
    )
    p.add_argument("--cache", action="store_true", help="keep large tensors clients send in llama.cpp's cache dir")
    p.add_argument("--threads", type=int, metavar="N", help="threads of the CPU device it exposes")


def rpc_command(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.fleet import serve

    if args.action == "ping":
        return _ping(args, ctx)
    if args.server is not None:
        raise UserError(f"serve takes no server ({args.server}): it is the server; --bind and --port say where")

    devices = tuple(d.strip() for d in (args.device or "").split(",") if d.strip())
    request = serve.resolve(
        store.find(ctx.dirs, args.build),
        args.bind,
        args.port,
        devices,
        cache=args.cache,
        threads=args.threads,
        allow_network=args.allow_network,
    )
    if request.on_network:
        render.warn(serve.UNSAFE.format(program=remote()[1].program, where=f"{args.bind}:{args.port}", port=args.port))

    def ready(serving: Serving) -> None:
        if args.json:
            print(json.dumps(serving.to_json()), flush=True)
            return
        render.result(
            f"{serving.build_id}: {remote()[1].program} listens on {serving.endpoint} (protocol {serving.protocol}, "
            f"{serving.transport}); clients: --rpc {serving.endpoint}"
        )
        for device in serving.devices:
            memory = f"{device.memory_total_mib} MiB, {device.memory_free_mib} MiB free"
            render.result(f"  {device.name}: {device.description} ({memory})")
        render.say(f"log: {serving.log}; Ctrl-C stops it")

    return serve.serve(request, store.run_log(ctx.dirs, f"rpc-server-{request.build.id}"), ready, render.say)


def _ping(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.fleet import endpoints, link

    if args.server is None:
        raise UserError("ping needs the server: buildmgr rpc ping BUILD HOST:PORT")
    if not 1 <= args.size <= 4096:
        raise UserError(f"--size {args.size}: give MiB from 1 to 4096")
    build = store.find(ctx.dirs, args.build)
    timeout = network_timeout_s(ctx)
    endpoints.ready_for(build, endpoints.parse(args.server), timeout)
    found = link.measure(build, args.server, args.size, 60 + 4 * timeout)
    shown = found.to_json()
    if args.json:
        print(json.dumps(shown, indent=2))
        return 0
    trip, up, down = shown["round_trip_ms"], shown["upload_gbs"], shown["download_gbs"]
    render.result(
        f"{found.server} from {found.build}: round trip {trip['median']:.3f} ms [{trip['min']:.3f}, {trip['max']:.3f}] "
        f"over {link.PINGS}; {args.size} MiB up {up['median']:.2f} GB/s [{up['min']:.2f}, {up['max']:.2f}], down "
        f"{down['median']:.2f} GB/s [{down['min']:.2f}, {down['max']:.2f}] over {link.ROUNDS}"
    )
    return 0
