"""What this host can build and with what: `recipes`, `doctor`, `cache stats`, `source sync|show`."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr.cli import command, render
from buildmgr.config import Context, ensure_writable
from buildmgr.errors import UserError
from buildmgr.findings import Check

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    if name == "recipes":
        command(sub, "recipes", recipes, "recipes, their backends, and whether this host can build them", json=True)
    elif name == "doctor":
        command(sub, "doctor", doctor, "every toolchain check for every backend, with fixes", json=True)
    elif name == "source":
        p = command(sub, "source", source, "fetch and verify the pinned source, or show it")
        p.add_argument("action", choices=("sync", "show"))
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
        p = command(sub, "cache", cache, "the compile cache: totals of hits and misses, local and remote", json=True)
        p.add_argument("action", choices=("stats",))


def _host(ctx: Context):
    from buildmgr.options import backend_host

    return backend_host(ctx.environ, ccache=ctx.settings.ccache)


def recipes(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import backends, toolchain
    from buildmgr.options import all_recipes

    host = _host(ctx)
    rows = []
    for recipe in all_recipes(ctx.dirs, warn=ctx.warn).values():
        report = backends.inspect(recipe.backends, host, deep=False)
        missing = toolchain.problems(host.toolchain, recipe.tools) + [c.line() for c in report.failures]
        rows.append(recipe.to_json() | {"buildable": not missing, "missing": missing, "file": recipe.source_file})
    if args.json:
        print(json.dumps({"recipes": rows}, indent=2))
        return 0
    table = render.table("recipe", "backends", "buildable here", "description")
    for row in rows:
        verdict = "[green]yes[/]" if row["buildable"] else "[red]no[/]: " + render.escape("; ".join(row["missing"]))
        table.add_row(row["name"], ", ".join(row["backends"]), verdict, row["description"])
    render.out().print(table)
    return 0


def doctor(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import backends, kits, toolchain

    host = _host(ctx)
    checks = toolchain.checks(host.toolchain) + list(backends.inspect(backends.known_backends(), host).checks)
    added = _added_toolchains(ctx, host)
    if args.json:
        rows = [row | {"checks": [dataclasses.asdict(c) for c in with_it]} for row, with_it in added]
        print(json.dumps({"checks": [dataclasses.asdict(c) for c in checks], "toolchains": rows}, indent=2))
    else:
        table = render.table("check", "ok", "found", "fix")
        labelled = [(f"{c.backend}: {c.what}", c) for c in checks]
        labelled += [(f"{c.backend} with {row['id']}: {c.what}", c) for row, with_it in added for c in with_it]
        for label, check in labelled:
            table.add_row(
                label,
                "[green]yes[/]" if check.ok else "[red]no[/]",
                render.escape(check.found),
                "" if check.ok else render.escape(check.fix),
            )
        render.out().print(table)
        for row, _ in added:
            if row["problem"]:
                ctx.warn(f"toolchain {row['id']} was changed after it was added: {row['problem']}")
        if not added:
            names = "|".join(kit.name for kit in kits.all_kits() if kit.builds)
            render.say(f"no toolchains added ('buildmgr toolchain add {names}' adds one)")
    return 1 if toolchain.problems(host.toolchain, ("cc", "c++")) else 0


def _added_toolchains(ctx: Context, host) -> list[tuple[dict[str, Any], tuple[Check, ...]]]:
    """Each toolchain added with `buildmgr toolchain add`: intact or not, and its backend's checks with it."""
    from buildmgr import backends, kits

    rows = []
    for added in kits.scan(ctx.dirs)[0]:
        problem = kits.changed(added)
        checks: tuple[Check, ...] = ()
        if added.kit.builds:
            with_it = dataclasses.replace(host, environ=kits.overlay(ctx.environ, (added,)))
            checks = backends.inspect((added.receipt.backend,), with_it).checks
        row = {"id": added.id, "backend": added.receipt.backend, "path": str(added.root)}
        rows.append((row | {"intact": problem is None, "problem": problem}, checks))
    return rows


def cache(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import compile_cache, toolchain

    ccache = toolchain.ccache_path(ctx.settings.ccache)
    if ccache is None:
        raise UserError(f"no ccache to ask: {toolchain.INSTALL_HINTS['ccache']}")
    result = {"ccache": ccache, "dir": str(ctx.dirs.ccache), "remote": ctx.settings.remote_cache}
    result |= compile_cache.totals(ccache, str(ctx.dirs.ccache), dict(ctx.environ))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        render.out().print(f"{key:14} {'none' if value is None else value}", markup=False)
    return 0


def source(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import source as sources

    pin = sources.load_pin()
    tree = sources.pinned_tree(pin, ctx.dirs)
    if args.action == "sync":
        if args.archive is not None and not args.archive.is_file():
            raise UserError(f"--archive {args.archive}: no such file")
        ensure_writable(ctx.dirs.data, "set XDG_DATA_HOME to a writable directory")
        ensure_writable(ctx.dirs.cache, "set XDG_CACHE_HOME to a writable directory")
        target = sources.vendor_dir() if args.vendor else None
        with render.err().status(f"fetching and verifying {pin.requirement} …"):
            tree = sources.sync_pinned(pin, ctx.dirs, args.archive, target)
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
        "synced": sources.is_synced(tree, pin),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            render.out().print(f"{key:14} {value}")
    return 0
