"""Release artifacts: `matrix`, `package`, `install-artifact`, `verify`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.cli import BUILD_HELP, command, render
from buildmgr.core.config import Context, ensure_writable
from buildmgr.core.errors import BuildFailed, UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    if name == "verify":
        p = command(
            sub,
            "verify",
            verify,
            "rebuild an artifact from its receipt here and compare every file",
            json=True,
            about="Check an artifact's .sha256, rebuild it here from the source, recipe and toolchain its receipt "
            "names, and compare every file byte for byte: the proof that it was built from what it says. A "
            "difference names each file that differs. --cold compiles everything, trusting no compile cache.",
            example="buildmgr verify llama-b11312-bin-linux-cpu-x64.tar.gz",
        )
        p.add_argument("file", type=Path, help="llama-…-bin-….tar.gz with its .sha256 beside it")
        p.add_argument("--cold", action="store_true", help="compile everything: no local compile cache either")
    elif name == "matrix":
        from buildmgr.building import kit_sources
        from buildmgr.tools.kit_spec import PipSource

        p = command(
            sub,
            "matrix",
            matrix,
            "a GitHub Actions matrix of builds for CI runners: fromJSON() ready",
            about="Print a GitHub Actions matrix of builds, one entry per recipe, architecture, OS and CPU "
            "architecture that can be built there (runner, container or toolkit, build command, artifact name), "
            "and what was skipped and why; '--format github' is one line for fromJSON().",
            example="buildmgr matrix cpu cuda vulkan --sm 86 --sm 90\n"
            'echo "matrix=$(buildmgr matrix --format github)" >> "$GITHUB_OUTPUT"',
        )
        p.add_argument(
            "recipes", nargs="*", metavar="RECIPE", help="recipes or '+' combinations (default: every recipe)"
        )
        for option in backends.arch_options():
            p.add_argument(option.flag, action="append", default=[], help=option.matrix_help)
        p.add_argument("--os", action="append", choices=("linux", "macos"), help="default linux (repeatable)")
        p.add_argument("--cpu-arch", action="append", choices=("x64", "arm64"), help="default x64 (repeatable)")
        p.add_argument(
            "--format",
            choices=("github", "json"),
            default="json",
            help='json (default): the entries and what was skipped, indented; github: one line {"include": …}',
        )
        p.add_argument(
            "--toolchain",
            choices=("system", "pypi"),
            default="system",
            help="pypi: "
            + "; ".join(
                f"{kit.backend} entries add {kit.source.vendor}'s PyPI toolkit ('buildmgr toolchain add') on a stock "
                f"runner, instead of {kit.source.vendor}'s container"
                for kit in kit_sources.pypi_kits(backends.known_backends())
                if isinstance(kit.source, PipSource)
            ),
        )
    elif name == "package":
        p = command(
            sub,
            "package",
            package,
            "a byte-identical .tar.gz of a build, with its .sha256 beside it",
            json=True,
            about="Pack a build into llama-<build>-bin-<os>-<recipe>-<cpu>.tar.gz with its receipt, and its "
            ".sha256 beside it: the same build packs to the same bytes on every machine (sorted entries, fixed "
            "times and owners), so 'buildmgr verify' can rebuild and compare it.",
            example="buildmgr package cuda -o dist/",
        )
        p.add_argument("build", help=BUILD_HELP)
        p.add_argument("-o", "--output", type=Path, default=Path("."), help="directory for the archive (default: .)")
    elif name == "install-artifact":
        help = "verify an artifact and this host, then install it as a build and smoke-run it"
        p = command(
            sub,
            "install-artifact",
            install_artifact,
            help,
            json=True,
            about="Install an archive made by 'buildmgr package' as a build: check its .sha256, then this host "
            "against what the receipt says the binaries need (CPU features, glibc, the GPUs' architectures), "
            "unpack it into its prefix and smoke-run it. A host it does not fit is refused before anything is "
            "written.",
            example="buildmgr install-artifact llama-b11312-bin-linux-cpu-x64.tar.gz",
        )
        p.add_argument("file", type=Path, help="llama-…-bin-….tar.gz with its .sha256 beside it")


def matrix(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.artifacts.matrix import MatrixRequest
    from buildmgr.artifacts.matrix import matrix as make_matrix
    from buildmgr.building.options import all_recipes
    from buildmgr.building.source import sdist

    known = all_recipes(ctx.dirs, "+".join(args.recipes), warn=ctx.warn)
    request = MatrixRequest(
        tuple(args.recipes or sorted(known)),
        {option.flag: tuple(getattr(args, option.dest)) for option in backends.arch_options()},
        tuple(args.os or ["linux"]),
        tuple(args.cpu_arch or ["x64"]),
        args.toolchain,
    )
    pin = sdist.load_pin()
    entries, skipped = make_matrix(request, known, pin.build_number, pin.commit)
    reasons = [f"{s['recipe']} on {s['os']}/{s['cpu_arch']}: {s['reason']}" for s in skipped]
    if not entries:
        raise UserError(f"nothing in this matrix can be built: {'; '.join(reasons)}")
    for reason in reasons:
        ctx.warn(f"left out {reason}")
    for entry in entries:
        if entry["native_cpu"]:
            ctx.warn(
                f"note: {entry['recipe']} builds with GGML_NATIVE=ON: its artifact runs only on CPUs like the runner's; "
                "universal builds every CPU variant"
            )
    if args.format == "github":
        print(json.dumps({"include": entries}, separators=(",", ":")))
    else:
        print(json.dumps({"include": entries, "skipped": skipped}, indent=2))
    return 0


def package(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr import store
    from buildmgr.artifacts import archive

    build = store.find(ctx.dirs, args.build)
    out_dir = args.output.resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"-o {args.output}: not a directory")
    with render.err().status(f"packaging {build.id} …"):
        packaged = archive.package(build, out_dir, ctx.environ)
    result = packaged.to_json()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    render.out().print(f"{packaged.archive} ({packaged.size / 1e6:.1f} MB), build {build.id}", markup=False)
    render.out().print(f"{packaged.checksum}  sha256 {packaged.sha256}", markup=False)
    code = "".join(f"; {c.key.upper()} {' '.join(result[c.key])}" for _, c in backends.device_codes() if result[c.key])
    render.out().print(
        f"needs: glibc ≥ {result['glibc'] or '?'}; {', '.join(result['needed']) or 'no other libraries'}{code}",
        markup=False,
    )
    return 0


def install_artifact(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.artifacts import compat, unpack
    from buildmgr.artifacts.install import install
    from buildmgr.cli.build import probe_after_build
    from buildmgr.core import hostfacts
    from buildmgr.core.progress import Reporter

    artifact = unpack.open_artifact(args.file)
    findings = compat.host_findings(artifact.receipt, ctx.environ, hostfacts.read().machine, ctx.dirs)
    for found in findings:
        render.say(found.line(), render.STYLES.get(found.severity, "yellow"))
    compat.require_runnable(findings, args.file.name)
    ensure_writable(ctx.dirs.data, "set XDG_DATA_HOME to a writable directory")
    ensure_writable(ctx.dirs.cache, "set XDG_CACHE_HOME to a writable directory")
    reporter = Reporter.for_environment(ctx.environ)
    # the checks above were of the archive read a moment ago: extracting reads it again, and its digest must hold
    outcome = install(
        ctx.dirs, args.file, artifact.sha256, artifact.receipt.id, lambda _: findings, reporter, ctx.environ
    )
    if outcome.already:
        render.say(f"already installed: {outcome.build.id} ({outcome.build.prefix})")
        devices = None
    else:
        render.say(f"installed {outcome.build.id} → {outcome.build.prefix}")
        devices = probe_after_build(ctx, outcome.build, outcome.probe)
    if args.json:
        result = {"id": outcome.build.id, "prefix": str(outcome.build.prefix), "already_installed": outcome.already}
        print(json.dumps(result | {"warnings": list(outcome.warnings), "devices": devices}, indent=2))
    return 0


def verify(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.artifacts import reproduce, unpack
    from buildmgr.core.progress import Reporter
    from buildmgr.tools import compile_cache

    artifact = unpack.open_artifact(args.file, refusing="verify")
    ensure_writable(ctx.dirs.cache, "set XDG_CACHE_HOME to a writable directory")
    result = reproduce.verify(ctx.dirs, artifact, ctx.environ, Reporter.for_environment(ctx.environ), cold=args.cold)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    if result.differ:
        raise BuildFailed(
            f"{args.file.name} is not what its receipt builds: {len(result.differ)} of {result.files} files differ: "
            + ", ".join(result.differ)
        )
    render.say(
        f"verified: all {result.files} files of {args.file.name} are what its receipt builds here; "
        f"{compile_cache.summary(result.ccache)}",
        "green",
    )
    return 0
