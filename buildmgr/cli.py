"""The command line: parse, then call one function per command. Errors become one line and an exit code."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from buildmgr import __version__
from buildmgr.config import Dirs, ensure_writable, resource_path
from buildmgr.errors import BuildFailed, BuildmgrError, UserError

_out = Console(highlight=False, soft_wrap=True)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        raise UserError(f"{message} (see '{self.prog} --help')")


def _recipes(dirs: Dirs):
    from buildmgr.recipes import load_recipes

    return load_recipes(resource_path("recipes"), dirs.user_recipes)


def _available_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return 4.0


def cmd_build(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import builder, plan, source, store, toolchain
    from buildmgr.progress import Reporter
    from buildmgr.recipes import compose

    recipe = compose(args.recipe, _recipes(dirs))
    spec = source.parse_source_spec(args.source)
    jobs = plan.parse_jobs(args.jobs, os.cpu_count() or 1, _available_gib())
    hint = "set XDG_DATA_HOME / XDG_CACHE_HOME to a writable directory"
    ensure_writable(dirs.data, hint)
    ensure_writable(dirs.cache, hint)
    tools = toolchain.detect()
    toolchain.require(tools, recipe.tools, recipe.name)
    tree = source.pinned_tree(source.load_pin(), dirs) if spec.kind == "pinned" else source.resolve_source(spec, dirs)
    build_plan = plan.make_plan(recipe, tree, tools, jobs)
    prefix = build_plan.prefix(dirs.builds)
    if not args.rebuild and store.read_receipt(prefix) is not None:
        _err.print(f"up to date: {build_plan.build_id} ({prefix}); --rebuild to build again")
        return 0
    if not tools.ccache.found:
        _err.print("[yellow]ccache not found: building without a compile cache (apt-get install ccache)[/]")
    builder.execute(build_plan, dirs, Reporter())
    return 0


def cmd_list(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    builds = store.installed(dirs)
    if args.json:
        rows = [{"id": b.id, "recipe": b.recipe, "prefix": str(b.prefix), "source": b.receipt["source"],
                 "backends": b.receipt["recipe"]["backends"], "finished": b.finished,
                 "smoke_passed": b.receipt["smoke"]["passed"]} for b in builds]
        print(json.dumps({"builds": rows}, indent=2))
        return 0
    if not builds:
        _err.print("no builds yet; run 'buildmgr build'")
        return 0
    table = Table("build", "backends", "source", "finished", "prefix", box=None)
    for b in builds:
        table.add_row(b.id, ", ".join(b.receipt["recipe"]["backends"]), b.receipt["source"]["origin"],
                      b.finished, str(b.prefix))
    _out.print(table)
    return 0


def cmd_which(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    build = store.find(dirs, args.build)
    if args.tool is None:
        print(build.prefix)
        return 0
    print(_tool(build, args.tool))
    return 0


def _tool(build, name: str) -> Path:
    path = build.tool(name)
    if not path.is_file():
        tools = sorted(p.name for p in (build.prefix / "bin").iterdir() if p.is_file())
        raise UserError(f"build {build.id} has no {name}; it has: {', '.join(tools)}")
    return path


def cmd_run(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UserError("name a tool to run, e.g. 'buildmgr run cpu -- llama-cli --version'")
    path = _tool(store.find(dirs, args.build), command[0])
    sys.stdout.flush()
    os.execv(path, [str(path), *command[1:]])
    return 0  # not reached


def cmd_remove(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    build = store.find(dirs, args.build)
    store.remove(dirs, build)
    _err.print(f"removed {build.id} ({build.prefix})")
    return 0


def cmd_gc(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    removed = store.gc(dirs)
    for path in removed:
        _err.print(f"removed {path}")
    _err.print(f"gc: {len(removed)} item(s) removed")
    return 0


def cmd_recipes(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import toolchain

    recipes = _recipes(dirs)
    tools = toolchain.detect()
    rows = []
    for recipe in recipes.values():
        missing = toolchain.problems(tools, recipe.tools)
        rows.append(recipe.to_json() | {"buildable": not missing, "missing": missing, "file": recipe.source_file})
    if args.json:
        print(json.dumps({"recipes": rows}, indent=2))
        return 0
    table = Table("recipe", "backends", "targets", "buildable here", "description", box=None)
    for row in rows:
        verdict = "[green]yes[/]" if row["buildable"] else "[red]no[/]: " + "; ".join(row["missing"])
        table.add_row(row["name"], ", ".join(row["backends"]), ", ".join(row["targets"]), verdict, row["description"])
    _out.print(table)
    return 0


def cmd_doctor(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import toolchain

    tools = toolchain.detect()
    table = Table("tool", "found", "version", "path", box=None)
    for tool in tools.tools().values():
        table.add_row(tool.name, "[green]yes[/]" if tool.found else "[red]no[/]", tool.version or "", tool.path or "")
    _out.print(table)
    problems = toolchain.problems(tools, ("cc", "c++", "ccache"))
    for problem in problems:
        _out.print(f"[red]✗[/] {problem}")
    return 1 if problems else 0


def cmd_source(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import source

    pin = source.load_pin()
    tree = source.pinned_tree(pin, dirs)
    if args.action == "sync":
        if args.archive is not None and not args.archive.is_file():
            raise UserError(f"--archive {args.archive}: no such file")
        ensure_writable(dirs.data, "set XDG_DATA_HOME to a writable directory")
        ensure_writable(dirs.cache, "set XDG_CACHE_HOME to a writable directory")
        with _err.status(f"fetching and verifying {pin.requirement} …"):
            tree = source.sync_pinned(pin, dirs, args.archive)
        _err.print(f"synced llama.cpp {tree.short_commit} → {tree.path}")
        return 0
    info = {"package": pin.requirement, "sha256": pin.sha256, "subdir": pin.subdir, "commit": pin.commit,
            "date": pin.date, "llama_version": pin.llama_version, "ggml_version": pin.ggml_version,
            "path": str(tree.path), "synced": source.is_synced(tree, pin)}
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            _out.print(f"{key:14} {value}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="buildmgr", description="Build llama.cpp for ggml backends into proven, versioned prefixes.")
    parser.add_argument("--version", action="version", version=f"buildmgr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("build", help="build a recipe (default cpu); a no-op if that exact build exists")
    p.add_argument("recipe", nargs="?", default="cpu", help="recipe, or recipes joined with '+'")
    p.add_argument("--source", help="llama.cpp checkout PATH or git URL@REF (default: the pinned sdist)")
    p.add_argument("--jobs", "-j", help="parallel compile jobs (default: cores, capped at 1 per 2 GiB free)")
    p.add_argument("--rebuild", action="store_true", help="build even if the identical prefix exists")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("list", help="installed builds")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("which", help="path of a build's prefix, or of one of its tools")
    p.add_argument("build", help="build id, or a recipe name for its newest build")
    p.add_argument("tool", nargs="?")
    p.set_defaults(func=cmd_which)

    p = sub.add_parser("run", help="run a tool of a build: buildmgr run BUILD -- TOOL ARGS…")
    p.add_argument("build")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("remove", help="remove a build")
    p.add_argument("build")
    p.set_defaults(func=cmd_remove)

    p = sub.add_parser("gc", help="remove stale staging dirs and build trees of removed builds")
    p.set_defaults(func=cmd_gc)

    p = sub.add_parser("recipes", help="recipes, their backends, and whether this host can build them")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_recipes)

    p = sub.add_parser("doctor", help="toolchain report")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("source", help="fetch and verify the pinned source, or show it")
    p.add_argument("action", choices=("sync", "show"))
    p.add_argument("--archive", type=Path, help="with sync: use this already downloaded sdist (verified all the same)")
    p.add_argument("--json", action="store_true", help="with show: print JSON")
    p.set_defaults(func=cmd_source)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        return args.func(args, Dirs.from_environment())
    except BuildFailed as err:
        for line in err.tail:
            _err.print(f"  {line}", markup=False)
        _err.print(f"buildmgr: error: {err}", markup=False)
        if err.log is not None:
            _err.print(f"full log: {err.log}", markup=False)
        return err.exit_code
    except BuildmgrError as err:
        _err.print(f"buildmgr: error: {err}", markup=False)
        return err.exit_code
    except KeyboardInterrupt:
        _err.print("buildmgr: interrupted")
        return 130
