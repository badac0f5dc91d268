"""Commands that take a llama.cpp command line after `--`: `run` (optionally checked first) and `check`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.cli import BUILD_HELP, render
from buildmgr.config import Context
from buildmgr.errors import UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    if name == "run":
        p = sub.add_parser("run", help="run a tool of a build: buildmgr run BUILD [--check] -- TOOL ARGS…")
        p.add_argument("build", help=BUILD_HELP)
        p.add_argument(
            "--check", action="store_true", help="check the placement flags first; run only if nothing fails"
        )
        p.add_argument("words", nargs="*", metavar="-- TOOL ARGS", help="the tool's command line, after '--'")
        p.set_defaults(func=run)
    elif name == "check":
        p = sub.add_parser(
            "check",
            help="check llama.cpp placement flags against this host's devices: buildmgr check BUILD -- TOOL ARGS…",
        )
        p.add_argument("build", help=BUILD_HELP)
        p.add_argument(
            "--verify", action="store_true", help="prove it: run llama-bench with the same placement, tiny model"
        )
        p.add_argument(
            "--model",
            type=Path,
            help="a GGUF model: weights per device from its header, and where each op runs (one short run of it)",
        )
        p.add_argument("--json", action="store_true", help="print the findings and the devices as JSON")
        p.add_argument("words", nargs="*", metavar="-- TOOL ARGS", help="the tool's command line, after '--'")
        p.set_defaults(func=check)


def _tool_command(args: argparse.Namespace, verb: str) -> list[str]:
    if not args.tool_command:
        raise UserError(f"name a tool, e.g. 'buildmgr {verb} cpu -- llama-cli --version'")
    return list(args.tool_command)


def run(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store

    command = _tool_command(args, "run")
    build = store.find(ctx.dirs, args.build)
    path = build.installed_tool(command[0])
    if args.check:
        from buildmgr.placement.run import run_check

        report = run_check(ctx.dirs, build, command, ctx.environ, model=None, run_verify=False)
        render.placement(report, outcome_on_stdout=False)  # the tool's own output is the result
        if report.refused:
            return 1
    sys.stdout.flush()
    os.execv(path, [str(path), *command[1:]])
    return 0  # not reached


def check(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.placement.run import run_check

    command = _tool_command(args, "check")
    build = store.find(ctx.dirs, args.build)
    build.installed_tool(command[0])
    report = run_check(
        ctx.dirs,
        build,
        command,
        ctx.environ,
        model=args.model,
        run_verify=args.verify,
        run_coverage=args.model is not None,
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        render.placement(report)
    return report.exit_code
