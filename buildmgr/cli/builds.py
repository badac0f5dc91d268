"""Installed builds: `list`, `which`, `remove`, `gc`."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from buildmgr.cli import BUILD_HELP, command, render
from buildmgr.core.config import Context

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    if name == "list":
        command(
            sub,
            "list",
            list_builds,
            "installed builds",
            json=True,
            about="Every installed build: its id (recipe and a hash of everything that went into it), the backends it "
            "has, the source it was built from, when it finished and its prefix. A build is made by 'buildmgr build' "
            "or 'buildmgr install --from'; 'buildmgr devices' shows what each sees here.",
            example="buildmgr list\nbuildmgr list --json | jq -r '.[].id'",
        )
    elif name == "which":
        p = command(
            sub,
            "which",
            which,
            "path of a build's prefix, or of one of its tools",
            about="Print the path of a build's prefix, or of one of its tools, on stdout and nothing else, for a "
            "script or a shell to use. A recipe name means its newest build; an unknown tool lists the tools the "
            "build has.",
            example='buildmgr which cuda\n"$(buildmgr which cuda llama-server)" -m model.gguf',
        )
        p.add_argument("build", help=BUILD_HELP)
        p.add_argument("tool", nargs="?", help="a tool of it, e.g. llama-server (default: the prefix)")
    elif name == "remove":
        p = command(
            sub,
            "remove",
            remove,
            "remove a build",
            json=True,
            about="Remove an installed build: its prefix is renamed aside at once (no run sees half of it), then "
            "deleted. Its build tree goes with it; the compile cache stays, so building it again is quick.",
            example="buildmgr remove cpu-a707a459\nbuildmgr remove vulkan",
        )
        p.add_argument("build", help=BUILD_HELP)
    elif name == "gc":
        p = command(
            sub,
            "gc",
            gc,
            "remove what interrupted runs left, saying what and why",
            json=True,
            about="Remove what interrupted or failed runs left behind, each with why: staging folders and half-done "
            "renames, unfinished extractions, downloads and clones, the build trees of builds that are not installed, "
            "lock files no run holds, and shaders no build used for 30 days. Installed builds, the toolchains they "
            "need and the compile cache stay.",
            example="buildmgr gc --dry-run\nbuildmgr gc",
        )
        p.add_argument("--dry-run", action="store_true", help="only list what would be removed, and why")


def list_builds(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.cli.keys import warn_untrusted_installs

    builds, unreadable = store.scan(ctx.dirs)
    for skipped in unreadable:
        ctx.warn(f"{skipped}; not listed")
    warn_untrusted_installs(ctx, builds)
    if args.json:
        rows = [
            {
                "id": b.id,
                "recipe": b.recipe,
                "prefix": str(b.prefix),
                "source": b.receipt.to_json()["source"],
                "backends": list(b.receipt.backends),
                "finished": b.finished,
                "smoke_passed": b.receipt.smoke.passed,
            }
            for b in builds
        ]
        listed = [{"prefix": str(u.prefix), "reason": u.reason} for u in unreadable]
        print(json.dumps({"builds": rows, "unreadable": listed}, indent=2))
        return 0
    if not builds:
        render.say("no build this buildmgr can read" if unreadable else "no builds yet; run 'buildmgr build'")
        return 0
    table = render.table("build", "backends", "source", "finished", "prefix")
    for b in builds:
        table.add_row(b.id, ", ".join(b.receipt.backends), b.receipt.source.origin, b.finished, str(b.prefix))
    render.show(table)
    return 0


def which(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store

    build = store.find(ctx.dirs, args.build)
    print(build.prefix if args.tool is None else build.installed_tool(args.tool))
    return 0


def remove(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store

    build = store.find(ctx.dirs, args.build)
    store.remove(ctx.dirs, build)
    if args.json:
        print(json.dumps({"removed": build.id, "prefix": str(build.prefix)}, indent=2))
    render.say(f"removed {build.id} ({build.prefix})")
    return 0


def gc(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.building import kits

    # toolchains themselves stay: builds load their run-time libraries from them ('toolchain remove' checks that)
    removed = store.gc(ctx.dirs, (kits.shelf(ctx.dirs),), dry=args.dry_run)
    if args.json:
        shown = [{"path": str(item.path), "why": item.why} for item in removed]
        print(json.dumps({"dry_run": args.dry_run, "removed": shown}, indent=2))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for item in removed:
        render.result(f"{verb} {item.path} ({item.why})")
    render.say(f"gc: {len(removed)} item(s) {verb}" + (" (nothing removed: --dry-run)" if args.dry_run else ""))
    return 0
