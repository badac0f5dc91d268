"""`buildmgr build`: resolve the request, then a no-op, a configure-only run, or the whole pipeline and a probe."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.cli import command
from buildmgr.core.config import Context
from buildmgr.proof.models import KERNELS_VERSION

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers
    from buildmgr.devices.probe import ProbeResult
    from buildmgr.store import Build


def register(sub: Subparsers, name: str) -> None:
    p = command(
        sub,
        "build",
        run,
        "build a recipe (default cpu); a no-op if that exact build exists",
        about="Build llama.cpp for a recipe (one backend, or several joined with '+') into its own prefix: preflight "
        "the toolchains, configure with CMake and prove from its File API that each backend is in, compile with "
        "Ninja through the compile cache, then prove the build runs the weight types real models use and list the "
        "devices it sees here. A build's id is a hash of everything that went into it, so building it again is a "
        "no-op; a failed build keeps its log and prints its path and last lines.",
        example="buildmgr build\nbuildmgr build cuda+vulkan --sm 86\nbuildmgr build cuda -D GGML_CUDA_FA=OFF --json",
    )
    p.add_argument("recipe", nargs="?", default="cpu", help="recipe, or recipes joined with '+'")
    for option in backends.arch_options():
        p.add_argument(option.flag, help=option.help)
    p.add_argument("--source", help="llama.cpp checkout PATH or git URL@REF (default: the pinned sdist)")
    p.add_argument("--jobs", "-j", help="parallel compile jobs (default: cores, capped by free memory per job)")
    p.add_argument(
        "--define",
        "-D",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra CMake define (part of the build's identity); GGML_*/LLAMA_* ones must exist",
    )
    p.add_argument(
        "--toolchain",
        action="append",
        default=[],
        metavar="NAME",
        help="build with a toolchain added by 'buildmgr toolchain add' (repeatable; by default one is used by itself "
        "when this host lacks its own and exactly one fits)",
    )
    p.add_argument("--rebuild", action="store_true", help="build even if the identical prefix exists")
    p.add_argument(
        "--configure-only",
        action="store_true",
        help="preflight, configure and prove the backends are in, without compiling or publishing",
    )
    p.add_argument("--json", action="store_true", help="print the build id, prefix and devices seen as JSON")


def run(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.building.options import BuildRequest, plan_build

    given = tuple((o.flag, getattr(args, o.dest)) for o in backends.arch_options() if getattr(args, o.dest) is not None)
    request = BuildRequest(args.recipe, given, args.source, args.jobs, tuple(args.define), tuple(args.toolchain))
    plan = plan_build(request, ctx.dirs, ctx.environ, lambda: ctx.settings, ctx.warn)
    if args.configure_only:
        from buildmgr.building import (
            builder,  # a no-op never imports the pipeline (nor rich's progress, nor the File API)
        )
        from buildmgr.core.progress import Reporter

        configured = builder.configure_only(plan, ctx.dirs, Reporter.for_environment(ctx.environ), ctx.environ)
        if args.json:
            print(
                json.dumps(
                    {"id": plan.build_id, "prefix": str(plan.prefix(ctx.dirs.builds))} | configured.to_json(), indent=2
                )
            )
        return 0
    prefix = plan.prefix(ctx.dirs.builds)
    built = None if args.rebuild else store.read_receipt(prefix)
    benched = built is not None and any("-m" in check.command for check in built.smoke.checks)
    up_to_date = built is not None and (not benched or (built.smoke.kernels or 0) >= KERNELS_VERSION)
    if built is not None and not up_to_date:
        proven = f"kernels model v{built.smoke.kernels}" if built.smoke.kernels else "an F32 model only"
        ctx.warn(
            f"{plan.build_id} was proven on {proven}, and this buildmgr's proof runs kernels model v{KERNELS_VERSION} "
            "(every weight type real models use): building it again (from the compile cache) to prove it"
        )
    if up_to_date:
        # plain text: importing rich would be a sixth of the no-op
        print(f"up to date: {plan.build_id} ({prefix}); --rebuild to build again", file=sys.stderr)
    else:
        if not plan.toolchain.ccache.found:
            from buildmgr.tools.toolchain import INSTALL_HINTS

            ctx.warn(f"ccache not found: building without a compile cache ({INSTALL_HINTS['ccache']})")
        from buildmgr.building import builder
        from buildmgr.core.progress import Reporter
        from buildmgr.proof.smoke import ProofFailed

        reporter = Reporter.for_environment(ctx.environ)
        try:
            build = builder.execute(plan, ctx.dirs, reporter, ctx.environ, rebuild=args.rebuild or built is not None)
        except ProofFailed as failed:
            fault = builder.learn(plan, failed, ctx.dirs, reporter)
            if fault is None:
                raise
            fixed = plan_build(request, ctx.dirs, ctx.environ, lambda: ctx.settings)  # its warnings were said
            if fixed.build_id == plan.build_id:  # the user's own -D keeps the fault in
                raise
            reporter.warn(f"building again without it ({fault.fixed}); later builds with this compiler leave it out")
            plan, prefix = fixed, fixed.prefix(ctx.dirs.builds)
            build = builder.execute(plan, ctx.dirs, reporter, ctx.environ, rebuild=args.rebuild)
        devices = probe_after_build(ctx, build)
    if args.json:
        seen = _stored_devices(ctx, plan.build_id) if up_to_date else devices
        print(
            json.dumps(
                {"id": plan.build_id, "prefix": str(prefix), "up_to_date": up_to_date, "devices": seen}, indent=2
            )
        )
    return 0


def _stored_devices(ctx: Context, build_id: str) -> list[str] | None:
    """What the build's stored probe saw (a no-op starts no program to ask again); None if it was never probed."""
    from buildmgr.devices import inventory

    stored = inventory.read(ctx.dirs, ctx.warn)
    if stored is None or build_id not in stored.builds:
        return None
    return [d.name for d in inventory.build_devices(stored, build_id)]


def probe_after_build(ctx: Context, build: Build, probed: ProbeResult | None = None) -> list[str]:
    """Probe a new build (or take what its smoke run's probe saw of the same files), record it in the inventory,
    and say what it sees (and why a backend shows nothing)."""
    from buildmgr.cli import render
    from buildmgr.devices import inventory

    known = {build.id: probed} if probed is not None else None
    entry = inventory.refresh(ctx.dirs, [build], ctx.environ, ctx.warn, known).builds[build.id]
    render.say(f"devices this build sees: {render.device_names(entry.probe.devices)}")
    for reason in entry.absent:
        render.say(f"  {reason}")
    from buildmgr.placement.run import removed_kernels

    for gap in removed_kernels(build):
        render.say(f"note: {gap.note}", "yellow")
    return [d.name for d in entry.probe.devices]
