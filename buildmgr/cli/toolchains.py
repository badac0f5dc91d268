"""`buildmgr toolchain add|list|remove`: toolchains assembled on demand (the kits in each backend's module)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from buildmgr.cli import command, render
from buildmgr.core.config import Context

if TYPE_CHECKING:
    from buildmgr.building.kits import Added
    from buildmgr.cli import Subparsers
    from buildmgr.core.memo import Memo


def register(sub: Subparsers, name: str) -> None:
    from buildmgr.building import kit_sources

    names = ", ".join(kit.name for kit in kit_sources.all_kits())
    p = command(
        sub,
        "toolchain",
        toolchain,
        f"add, list or remove toolchains buildmgr assembles ({names})",
        about="Toolchains a host lacks, assembled without root from their vendors' packages (NVIDIA's CUDA wheels "
        "on PyPI, Debian's Vulkan SDK packages), each checked and kept under <data>/toolchains/. 'add' assembles "
        "one and runs its checks; a build uses it when the host has no toolchain of its own (or with "
        "--toolchain). 'list' shows them and whether each is intact; 'remove' refuses one an installed build "
        "still loads libraries from.",
        example=f"buildmgr toolchain add {kit_sources.example()}\nbuildmgr toolchain list\n"
        f"buildmgr toolchain remove {kit_sources.example().replace('==', '-')}",
    )
    p.add_argument("action", choices=("add", "list", "remove"), help="add one, list the added, or remove one")
    p.add_argument("what", nargs="?", help=f"add: NAME[==VERSION] ({names}; e.g. {kit_sources.example()}); remove: ID")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")


def toolchain(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.building import kit_sources
    from buildmgr.core.errors import UserError

    if args.action == "list":
        if args.what:
            raise UserError("toolchain list takes no NAME")
        return _list(args, ctx)
    if not args.what:
        example = kit_sources.example() if args.action == "add" else kit_sources.example().replace("==", "-")
        raise UserError(f"toolchain {args.action} needs a NAME, e.g. buildmgr toolchain {args.action} {example}")
    return _add(args, ctx) if args.action == "add" else _remove(args, ctx)


def _add(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.building import doctor, kit_sources, kits
    from buildmgr.building.options import backend_host
    from buildmgr.core.progress import Reporter

    request = kit_sources.parse_request(args.what)
    host = backend_host(ctx.environ, ctx.dirs.toolchain_cache, ctx.settings.ccache)
    added, already = kits.add(
        ctx.dirs, request, ctx.environ, Reporter.for_environment(ctx.environ), host.toolchain.cc.path
    )
    lacking = doctor.still_lacking(added, ctx.environ, ctx.settings)
    if args.json:
        print(json.dumps(_row(added, ctx) | {"already": already, "host_lacks": lacking}, indent=2))
    else:
        receipt = added.receipt
        verb = "already added" if already else f"added in {receipt.seconds:.1f} s"
        render.say(
            f"{added.id} {verb}: {added.root} ({receipt.size / 2**30:.2f} GiB, {len(receipt.packages)} packages)"
        )
        for line in lacking:
            ctx.warn(f"this host still lacks, for {receipt.backend} builds: {line}")
    return 0


def _row(added: Added, ctx: Context, memo: Memo | None = None) -> dict[str, Any]:
    from buildmgr.building import kits

    receipt = added.receipt
    problem = kits.changed(added, memo)
    return {
        "id": added.id,
        "name": receipt.name,
        "version": receipt.version,
        "backend": receipt.backend,
        "path": str(added.root),
        "requested": receipt.requested,
        "source": receipt.source,
        "packages": {p.name: p.version for p in receipt.packages},
        "added": receipt.added,
        "seconds": receipt.seconds,
        "size": receipt.size,
        "intact": problem is None,
        "problem": problem,
        "needed_by": kits.needed_by(ctx.dirs, added.id),
    }


def _list(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.building import kit_sources, kits
    from buildmgr.core.memo import Memo

    added, broken = kits.scan(ctx.dirs)
    memo = Memo.load(ctx.dirs.preflight_cache)  # a large toolchain's hashes take seconds: kept while its files stay
    rows = [_row(a, ctx, memo) for a in added]
    if rows:
        memo.save(ctx.dirs.preflight_cache)
    unreadable = [{"path": str(b.prefix), "reason": b.reason} for b in broken]
    if args.json:
        print(json.dumps({"toolchains": rows, "unreadable": unreadable}, indent=2))
        return 0
    if not rows and not unreadable:
        render.say(f"no toolchains added; e.g. buildmgr toolchain add {kit_sources.example()}")
        return 0
    table = render.table("id", "backend", "size", "packages", "state", "needed by")
    for row in rows:
        state = "[green]intact[/]" if row["intact"] else f"[red]changed[/]: {render.escape(row['problem'])}"
        packages = ", ".join(f"{name} {version}" for name, version in row["packages"].items())
        needed = ", ".join(row["needed_by"]) or "-"
        table.add_row(row["id"], row["backend"], f"{row['size'] / 2**30:.2f} GiB", packages, state, needed)
    render.show(table)
    for item in broken:
        ctx.warn(str(item))
    return 0


def _remove(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.building import kits

    removed = kits.remove(ctx.dirs, args.what)
    if args.json:
        print(json.dumps({"removed": removed.id, "path": str(removed.root)}, indent=2))
    render.say(f"removed {removed.id} ({removed.root})")
    return 0
