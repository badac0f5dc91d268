"""What this host can build and with what: `recipes`, `doctor`, `cache stats`, `source sync|show`."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.cli import command, render
from buildmgr.core.config import Context, ensure_writable
from buildmgr.core.errors import UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    if name == "recipes":
        command(
            sub,
            "recipes",
            recipes,
            "recipes, their backends, and whether this host can build them",
            json=True,
            about="Every recipe (built in, and yours in <config>/recipes/*.toml): its backends and CMake defines, "
            "whether this host can build it now, what it lacks if not (with the fix, or the toolchain "
            "'buildmgr toolchain add' can assemble), and the kernels its defines remove.",
            example="buildmgr recipes\nbuildmgr recipes --json | jq -r '.[] | select(.buildable) | .name'",
        )
    elif name == "doctor":
        command(
            sub,
            "doctor",
            doctor,
            "every toolchain check for every backend, with fixes",
            json=True,
            about="Run every toolchain check of every backend on this host (compilers, SDKs, headers, the compile "
            "cache), and those of each toolchain added with 'buildmgr toolchain add', one per line: what passed, what "
            "failed and how to fix it. Nothing is built.",
            example="buildmgr doctor\nbuildmgr doctor --json",
        )
    elif name == "source":
        p = command(
            sub,
            "source",
            source,
            "fetch and verify the pinned source, or show it",
            about="llama.cpp comes from the pinned llama-cpp-python sdist on PyPI, checked against its pinned "
            "sha256. 'sync' fetches and verifies it (a build does so itself when needed); 'show' prints what is "
            "pinned and where the verified tree is kept.",
            example="buildmgr source sync\nbuildmgr source show --json",
        )
        p.add_argument("action", choices=("sync", "show"), help="sync: fetch and verify; show: what is pinned and kept")
        p.add_argument(
            "--archive", type=Path, help="with sync: use this already downloaded sdist (verified all the same)"
        )
        p.add_argument("--json", action="store_true", help="with show: print JSON")
        p.add_argument(
            "--vendor",
            action="store_true",
            help="with sync: extract the verified tree into this checkout's vendor/llama.cpp (build it with --source)",
        )
    elif name == "cache":
        p = command(
            sub,
            "cache",
            cache,
            "the compile cache: totals of hits and misses, local and remote",
            json=True,
            about="The compile cache every build goes through (ccache, with a remote store where [cache] remote in "
            "<config>/config.toml or BUILDMGR_REMOTE_CACHE names one): 'stats' shows which ccache and folder, the "
            "compiles served by the local and by the remote store, those that missed, and the hit rate.",
            example="buildmgr cache stats",
        )
        p.add_argument("action", choices=("stats",), help="stats: hits and misses of every build")


def recipes(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import backends
    from buildmgr.building import doctor as host

    states = host.recipes(ctx.dirs, ctx.environ, ctx.settings, ctx.warn)
    removed = {
        s.recipe.name: [g.note for g in backends.removed_kernels(s.recipe.backends, dict(s.recipe.defines))]
        for s in states
    }
    if args.json:
        rows = [
            s.recipe.to_json()
            | {
                "buildable": s.buildable,
                "missing": list(s.missing),
                "toolchains": list(s.toolchains),
                "file": s.recipe.source_file,
                "removed_kernels": removed[s.recipe.name],
            }
            for s in states
        ]
        print(json.dumps({"recipes": rows}, indent=2))
        return 0
    table = render.table("recipe", "backends", "buildable here", "description")
    for state in states:
        with_kits = f" (with toolchain {', '.join(state.toolchains)})" if state.toolchains else ""
        verdict = (
            f"[green]yes[/]{with_kits}" if state.buildable else "[red]no[/]: " + render.escape("; ".join(state.missing))
        )
        described = "; ".join([state.recipe.description, *removed[state.recipe.name]])
        table.add_row(state.recipe.name, ", ".join(state.recipe.backends), verdict, render.escape(described))
    render.show(table)
    return 0


def doctor(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.building import doctor as host
    from buildmgr.building import kit_sources

    report = host.doctor(ctx.dirs, ctx.environ, ctx.settings)
    if args.json:
        rows = [
            {
                "id": state.added.id,
                "backend": state.added.receipt.backend,
                "path": str(state.added.root),
                "intact": state.problem is None,
                "problem": state.problem,
                "checks": [dataclasses.asdict(c) for c in state.checks],
            }
            for state in report.toolchains
        ]
        print(json.dumps({"checks": [dataclasses.asdict(c) for c in report.checks], "toolchains": rows}, indent=2))
    else:
        labelled = [(f"{c.backend}: {c.what}", c) for c in report.checks]
        labelled += [(f"{c.backend} with {s.added.id}: {c.what}", c) for s in report.toolchains for c in s.checks]
        render.checks(labelled)
        for state in report.toolchains:
            if state.problem:
                ctx.warn(f"toolchain {state.added.id} was changed after it was added: {state.problem}")
        if not report.toolchains:
            names = "|".join(kit.name for kit in kit_sources.all_kits() if kit.builds)
            render.say(f"no toolchains added ('buildmgr toolchain add {names}' adds one)")
    return 1 if report.compilers_missing else 0


def cache(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.tools import compile_cache, toolchain

    ccache = toolchain.ccache_path(ctx.settings.ccache, ctx.environ)
    if ccache is None:
        raise UserError(f"no ccache to ask: {toolchain.INSTALL_HINTS['ccache']}")
    result: dict[str, object] = {"ccache": ccache, "dir": str(ctx.dirs.ccache), "remote": ctx.settings.remote_cache}
    result |= compile_cache.totals(ccache, str(ctx.dirs.ccache), dict(ctx.environ))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        shown = f"{value * 100:.0f} %" if key == "hit_rate" and isinstance(value, float) else value  # as build says it
        render.out().print(f"{key:14} {'none' if shown is None else shown}", markup=False)
    return 0


def source(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.building.source import sdist

    if args.action == "show" and (args.archive is not None or args.vendor):
        raise UserError("--archive and --vendor go with sync: buildmgr source sync --archive FILE [--vendor]")
    if args.action == "sync" and args.json:
        raise UserError("--json goes with show: buildmgr source sync && buildmgr source show --json")
    pin = sdist.load_pin()
    tree = sdist.pinned_tree(pin, ctx.dirs)
    if args.action == "sync":
        if args.archive is not None and not args.archive.is_file():
            raise UserError(f"--archive {args.archive}: no such file")
        ensure_writable(ctx.dirs.data, "set XDG_DATA_HOME to a writable directory")
        ensure_writable(ctx.dirs.cache, "set XDG_CACHE_HOME to a writable directory")
        target = sdist.vendor_dir() if args.vendor else None
        with render.err().status(f"fetching and verifying {pin.requirement} …"):
            tree = sdist.sync_pinned(pin, ctx.dirs, args.archive, target)
        render.say(f"synced llama.cpp {tree.short_commit} → {tree.path}")
        return 0
    info = {
        "package": pin.requirement,
        "sha256": pin.sha256,
        "subdir": pin.subdir,
        "commit": pin.commit,
        "date": pin.date,
        "llama_version": pin.llama_version,
        "ggml_version": pin.ggml_version,
        "path": str(tree.path),
        "synced": sdist.is_synced(tree, pin),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            render.out().print(f"{key:14} {value}")
    return 0
