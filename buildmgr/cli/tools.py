"""Commands that take a llama.cpp command line after `--`: `run` (optionally checked first) and `check`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.cli import BUILD_HELP, command, network_timeout_s, render
from buildmgr.core.config import Context
from buildmgr.core.errors import UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    if name == "run":
        p = command(
            sub,
            "run",
            run,
            "run a tool of a build: buildmgr run BUILD [--check] -- TOOL ARGS…",
            about="Run one of a build's tools (llama-cli, llama-server, llama-bench …) with the arguments after '--'. "
            "The tool takes buildmgr's place, so its output, exit code and signals are its own. With --check, the "
            "placement flags are checked first against the devices this build sees here (as 'buildmgr check' does), "
            "the findings go to stderr, and the tool is not started if one fails.",
            example="buildmgr run cpu -- llama-cli --version\n"
            "buildmgr run cuda --check -- llama-server -m model.gguf -dev CUDA0 -ngl 99",
        )
        p.add_argument("build", help=BUILD_HELP)
        p.add_argument(
            "--check", action="store_true", help="check the placement flags first; run only if nothing fails"
        )
        p.add_argument("words", nargs="*", metavar="-- TOOL ARGS", help="the tool's command line, after '--'")
    elif name == "check":
        p = command(
            sub,
            "check",
            check,
            "check llama.cpp placement flags against this host's devices: buildmgr check BUILD -- TOOL ARGS…",
            about="Check a tool's placement flags (-dev, -ts, -sm, -mg, -ngl, -ot, -fa …) against the devices this "
            "build really sees here, without running the tool: a name that is not a device, one card named twice, a "
            "split that cannot be, each with what to write instead. --verify proves the placement with llama-bench "
            "on a tiny model; --model reads a GGUF's weights per device and runs it once to show where each op of "
            "prefill and decode runs, naming every op the CPU runs for a device's layer and why. Exit 1 if a finding "
            "fails.",
            example="buildmgr check cuda+vulkan -- llama-cli -dev CUDA0,Vulkan1 -ts 3,1\n"
            "buildmgr check cuda --model model.gguf -- llama-server -dev CUDA0 -fa 1",
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

        report = run_check(
            ctx.dirs, build, command, ctx.environ, model=None, run_verify=False, timeout_s=network_timeout_s(ctx)
        )
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
        timeout_s=network_timeout_s(ctx),
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        render.placement(report)
    return report.exit_code
