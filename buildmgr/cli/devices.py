"""`buildmgr devices`: the inventory (stored, refreshed, or previewed under another environment), a capture from any
host, and a suggested -dev per build."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.cli import command, network_timeout_s, render
from buildmgr.core.config import Context, ensure_writable
from buildmgr.core.errors import UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers
    from buildmgr.devices.inventory_file import Inventory


def register(sub: Subparsers, name: str) -> None:
    p = command(
        sub,
        "devices",
        run,
        "the devices each build really sees on this host, grouped by physical card",
        about="The devices each installed build really sees on this host, from the build's own llama.cpp, grouped "
        "by physical card: which names (CUDA0, Vulkan1 …) are one card, which card is an integrated GPU, and "
        "which environment variables move the names. Results are kept in the inventory and probed again when a "
        "build, a driver or the environment changes. --parse reads the devices out of any pasted log or tool "
        "output instead, for a host buildmgr does not run on.",
        example="buildmgr devices\nbuildmgr devices --suggest\nbuildmgr devices --rpc 192.168.1.20:50052\n"
        "llama-cli --list-devices 2>&1 | buildmgr devices --parse -",
    )
    p.add_argument("--refresh", action="store_true", help="probe every build again")
    p.add_argument("--json", action="store_true", help="print the cards, their names and the notes as JSON")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"preview the names under another enumeration environment (e.g. {backends.enumeration_variables()[0]}=1): "
        "a fresh probe, not stored",
    )
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT,…",
        help="preview with these RPC servers' devices added, as a tool's --rpc adds them (each build with the RPC "
        "backend asked, each server's reach checked first): a fresh probe, not stored",
    )
    p.add_argument(
        "--fleet",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="like --rpc, the servers read from what 'buildmgr rpc serve --json' printed on each host (one a line; "
        "repeatable): each remote device is named with the device, build and protocol behind it, and a server "
        "speaking another protocol than a build here is refused before anything connects",
    )
    p.add_argument(
        "--suggest",
        action="store_true",
        help="a -dev string per build that uses each physical card once (and -ts by free memory)",
    )
    p.add_argument("--prefer", choices=("dgpu", "all", "igpu"), help="with --suggest: which cards (default dgpu)")
    p.add_argument(
        "--parse",
        type=Path,
        metavar="FILE",
        help="read the devices from a pasted log or tool output instead (any text that lists them: --list-devices, "
        "llama.cpp's start-up lines, vulkaninfo, nvidia-smi …; - reads stdin)",
    )
    for _, capture in backends.captures():
        p.add_argument(capture.option, type=Path, metavar="FILE", help=capture.help)


def _read_capture(path: Path | None, what: str) -> str:
    """A pasted text, from a file or `-` (stdin); odd bytes in a log are replaced, never fatal."""
    if path is None:
        return ""
    if str(path) == "-":
        return sys.stdin.buffer.read().decode("utf-8", errors="replace")
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory: name the file that holds the capture")
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise UserError(f"cannot read {what} file {path}: {err.strerror or err}") from None


def _refuse_stray(args: argparse.Namespace) -> None:
    """Options that only mean something with another one are refused without it, never ignored."""
    if args.parse is None:
        for _, capture in backends.captures():
            if getattr(args, capture.dest) is not None:
                raise UserError(f"{capture.option} goes with --parse (a live `devices` asks the tool itself)")
    if args.prefer is not None and not args.suggest:
        raise UserError("--prefer goes with --suggest")


def _env_assignments(items: list[str]) -> dict[str, str]:
    known = backends.enumeration_variables()
    assignments = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in known:
            raise UserError(f"--env takes NAME=VALUE with NAME one of {', '.join(known)}; got {item!r}")
        assignments[name] = value
    return assignments


def _parse(args: argparse.Namespace) -> int:
    """The same view from text captured on any host."""
    from buildmgr.devices import identity, inventory
    from buildmgr.devices.captures import read_text

    if args.suggest:
        raise UserError("--suggest needs builds, and a capture has no builds: leave out --parse")
    parsed = read_text(_read_capture(args.parse, "--parse"))
    captured = {}
    for name, capture in backends.captures():
        path = getattr(args, capture.dest)
        captured[name] = capture.parse(_read_capture(path, capture.option))
        if path is not None and not captured[name]:  # a wrong file would otherwise change nothing, unsaid
            raise UserError(
                f"{capture.option} {path}: no GPU in it; give what `{' '.join(capture.command)}` printed, "
                f"or leave {capture.option} out"
            )
    # each run of a program in the text is its own set of devices (two builds, two hosts): resolved apart
    # in the order the text printed them (devices are read shape by shape, not line by line)
    runs = sorted(dict.fromkeys(d.run for d in parsed.devices), key=lambda run: run or 0) or [None]
    several = len(runs) > 1
    views = []
    for run in runs:
        mine = [d for d in parsed.devices if d.run == run]
        resolved, resolved_notes = identity.resolve(mine, captured)
        views.append((run, resolved, [f"run {run}: {n}" if several else n for n in resolved_notes]))
    notes = [*parsed.notes, *(n for _, _, said in views for n in said)]
    if args.json:
        devices = [d.to_json() for _, resolved, _ in views for d in resolved]
        shown = {"devices": devices, "notes": notes, "shapes": list(parsed.shapes)}
        print(json.dumps(shown, indent=2, sort_keys=True))
    else:
        if parsed.shapes:
            render.out().print(f"read from: {', '.join(parsed.shapes)}", markup=False)
        for run, resolved, said in views:
            if several:
                render.out().print(f"run {run}:", markup=False)
            free = {d.name: d.memory_free_mib for d in resolved}
            shown_notes = [*parsed.notes, *said] if run == runs[0] else said
            render.devices_table(
                inventory.cards(resolved, {}, {}), {}, shown_notes, empty="no devices in that text", free_mib=free
            )
    return 0


def run(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.cli.keys import warn_untrusted_installs
    from buildmgr.devices import inventory

    _refuse_stray(args)
    if args.parse is not None:
        return _parse(args)
    warn_untrusted_installs(ctx, store.installed(ctx.dirs))
    if args.rpc is not None or args.fleet:
        data = _remote(args, ctx)
    elif args.env:
        environ = dict(ctx.environ) | _env_assignments(args.env)
        data = inventory.preview(store.installed(ctx.dirs), environ)
        ctx.warn("preview under " + " ".join(f"{k}={v}" for k, v in (data.preview_env or {}).items()) + " (not stored)")
    else:
        stored = None if args.refresh else inventory.read(ctx.dirs, ctx.warn)
        builds = store.installed(ctx.dirs)
        if stored is None or set(stored.builds) != {b.id for b in builds}:
            ensure_writable(ctx.dirs.inventory, "set XDG_DATA_HOME to a writable directory")
            stored = inventory.refresh(ctx.dirs, builds, ctx.environ, ctx.warn)
        data = stored
        for change in inventory.environment_changes(data.builds, ctx.environ):
            ctx.warn(change)
    data = dataclasses.replace(data, notes=(*data.notes, *_removed_kernels(ctx, data)))
    if args.suggest:
        return _suggest(data, args.prefer or "dgpu", args.json)
    if args.json:
        print(json.dumps(data.to_json(), indent=2, sort_keys=True))
    else:
        render.devices_table(data.cards, data.builds, data.notes)
    return 0


def _remote(args: argparse.Namespace, ctx: Context) -> Inventory:
    """--rpc or --fleet: every build with the remote backend probed with the servers added (fleet/devices)."""
    from buildmgr import store
    from buildmgr.fleet import devices, endpoints, reports

    if args.rpc is not None and args.fleet:
        raise UserError("--rpc and --fleet both name the servers: give one of them")
    fleet = reports.read(args.fleet) if args.fleet else ()
    servers = endpoints.parse(",".join(r.endpoint for r in fleet) if fleet else args.rpc)
    environ = dict(ctx.environ) | _env_assignments(args.env)
    data = devices.preview(store.installed(ctx.dirs), servers, fleet, environ, network_timeout_s(ctx))
    ctx.warn(f"preview with {backends.remote()[1].client_flag} {','.join(servers)} (not stored)")
    return data


def _removed_kernels(ctx: Context, data: Inventory) -> list[str]:
    """What each build's defines left out of its backends' kernels: a device of it that cannot run what flags ask."""
    from buildmgr import store
    from buildmgr.placement.run import removed_kernels

    return [
        f"{build.id}: {gap.note}"
        for build in store.installed(ctx.dirs)
        if build.id in data.builds
        for gap in removed_kernels(build)
    ]


def _suggest(data: Inventory, prefer: str, as_json: bool) -> int:
    from buildmgr.devices import identity, inventory
    from buildmgr.placement.check import suggest

    suggestions = {}
    for build_id in sorted(data.builds):
        devices = inventory.build_devices(data, build_id)
        suggestion = suggest(devices, identity.default_selection(devices), prefer)
        suggestions[build_id] = suggestion.to_json()
        if not as_json:
            kind = {"dgpu": "discrete GPU", "igpu": "iGPU", "all": "GPU"}[prefer]
            render.out().print(
                f"{build_id}: {suggestion.flags() if suggestion.devices else f'no {kind} here'}", markup=False
            )
    if as_json:
        print(json.dumps({"prefer": prefer, "builds": suggestions}, indent=2))
    return 0
