"""The command line: parse, then call one function per command. Errors become one line and an exit code."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import __version__
from buildmgr.config import Dirs, ensure_writable
from buildmgr.errors import BuildFailed, BuildmgrError, UserError

if TYPE_CHECKING:
    from buildmgr.inventory_file import BuildEntry, Inventory
    from buildmgr.probe import Device


@functools.cache
def _out():
    from rich.console import Console  # imported late: `--json` paths never pay for rich

    return Console(highlight=False, soft_wrap=True)


@functools.cache
def _err():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _warn(message: str) -> None:
    _err().print(message, markup=False, style="yellow")


def _table(*columns: str):
    from rich.table import Table

    return Table(*columns, box=None)


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other user error
        raise UserError(f"{message} (see '{self.prog} --help')")


def cmd_build(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store
    from buildmgr.options import BuildRequest, resolve

    request = BuildRequest(args.recipe, args.sm, args.gfx, args.source, args.jobs, tuple(args.define))
    build_plan = resolve(request, dirs, warn=_warn)
    if args.configure_only:
        from buildmgr import builder
        from buildmgr.progress import Reporter

        configured = builder.configure_only(build_plan, dirs, Reporter(), dict(os.environ))
        if args.json:
            print(
                json.dumps(
                    {
                        "id": build_plan.build_id,
                        "prefix": str(build_plan.prefix(dirs.builds)),
                        "build_dir": str(configured.build_dir),
                        "log": str(configured.log),
                        "targets": list(configured.targets),
                    },
                    indent=2,
                )
            )
        return 0
    prefix = build_plan.prefix(dirs.builds)
    up_to_date = not args.rebuild and store.read_receipt(prefix) is not None
    if up_to_date:
        # plain text: importing rich would be a sixth of the no-op
        print(f"up to date: {build_plan.build_id} ({prefix}); --rebuild to build again", file=sys.stderr)
    else:
        if not build_plan.toolchain.ccache.found:
            from buildmgr.toolchain import INSTALL_HINTS

            _err().print(
                f"ccache not found: building without a compile cache ({INSTALL_HINTS['ccache']})",
                style="yellow",
                markup=False,
            )
        from buildmgr import builder  # a no-op never imports the pipeline (nor rich's progress, nor the File API)
        from buildmgr.progress import Reporter

        build = builder.execute(build_plan, dirs, Reporter(), dict(os.environ), rebuild=args.rebuild)
        devices = _probe_after_build(dirs, build)
    if args.json:
        result = {"id": build_plan.build_id, "prefix": str(prefix), "up_to_date": up_to_date}
        print(json.dumps(result | ({} if up_to_date else {"devices": devices}), indent=2))
    return 0


def _probe_after_build(dirs: Dirs, build) -> list[str]:
    from buildmgr import inventory

    entry = inventory.refresh(dirs, [build], warn=_warn).builds[build.id]
    names = [d.name for d in entry.probe.devices]
    _err().print(f"devices this build sees: {', '.join(names) or '(none besides the CPU)'}", markup=False)
    for reason in entry.absent:
        _err().print(f"  {reason}", markup=False)
    return names


def cmd_list(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    builds, unreadable = store.scan(dirs)
    for skipped in unreadable:
        _warn(f"{skipped}; not listed")
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
        skipped = [{"prefix": str(u.prefix), "reason": u.reason} for u in unreadable]
        print(json.dumps({"builds": rows, "unreadable": skipped}, indent=2))
        return 0
    if not builds:
        _err().print("no build this buildmgr can read" if unreadable else "no builds yet; run 'buildmgr build'")
        return 0
    table = _table("build", "backends", "source", "finished", "prefix")
    for b in builds:
        table.add_row(b.id, ", ".join(b.receipt.backends), b.receipt.source.origin, b.finished, str(b.prefix))
    _out().print(table)
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


def _command(args: argparse.Namespace, verb: str, own: tuple[str, ...] = ()) -> list[str]:
    """TOOL ARGS… after '--'; buildmgr's own options may stand between BUILD and '--' (argparse leaves them here)."""
    command = list(args.command)
    while command and command[0] in own:
        name = command.pop(0).removeprefix("--")
        if name == "model":
            if not command:
                raise UserError("--model needs a path to a GGUF file")
            args.model = Path(command.pop(0))
        else:
            setattr(args, name, True)
    command = command[1:] if command[:1] == ["--"] else command
    if not command:
        raise UserError(f"name a tool, e.g. 'buildmgr {verb} cpu -- llama-cli --version'")
    return command


def cmd_run(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import placement, store

    command = _command(args, "run", ("--check",))
    build = store.find(dirs, args.build)
    path = _tool(build, command[0])
    if args.check:
        report = placement.run_check(dirs, build, command, None, False, dict(os.environ))
        _print_placement(report)
        if report["exit_code"]:
            return report["exit_code"]
    sys.stdout.flush()
    os.execv(path, [str(path), *command[1:]])
    return 0  # not reached


def _print_placement(report: dict) -> None:
    def show(finding: dict) -> None:
        style = {"error": "red", "warning": "yellow"}.get(finding["severity"], "dim")
        line = f"{finding['severity']}: {finding['flag']}: {finding['message']}" + (
            f"; {finding['fix']}" if finding["fix"] else ""
        )
        _err().print(line, markup=False, style=style)

    for finding in report["notes"]:
        show(finding)
    for number, test in enumerate(report["tests"], 1):
        if len(report["tests"]) > 1:
            _err().print(f"test {number}: {test['flags']}", markup=False)
        for finding in test["findings"]:
            show(finding)
        if "verify" in test:
            outcome = test["verify"]
            _err().print(
                f"verify: {outcome['result']}"
                + (f" ({outcome['failure']})" if outcome["failure"] else "")
                + f"; {outcome['agreement']}",
                markup=False,
            )
            if outcome["result"] == "unknown":
                for line in outcome["tail"]:
                    _err().print(f"  {line}", markup=False)
        if not test["findings"] and not any(n["severity"] == "error" for n in report["notes"]):
            _err().print("placement ok", markup=False, style="green")


def cmd_check(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import placement, store

    command = _command(args, "check", ("--verify", "--json", "--model"))
    build = store.find(dirs, args.build)
    _tool(build, command[0])
    report = placement.run_check(dirs, build, command, args.model, args.verify, dict(os.environ))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_placement(report)
    return report["exit_code"]


def cmd_remove(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    build = store.find(dirs, args.build)
    store.remove(dirs, build)
    _err().print(f"removed {build.id} ({build.prefix})")
    return 0


def cmd_gc(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import store

    removed = store.gc(dirs)
    for path in removed:
        _err().print(f"removed {path}")
    _err().print(f"gc: {len(removed)} item(s) removed")
    return 0


def _host(dirs: Dirs):
    from buildmgr.config import Settings
    from buildmgr.options import backend_host

    return backend_host(ccache=Settings.load(dirs, dict(os.environ)).ccache)


def cmd_recipes(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import backends, toolchain
    from buildmgr.options import all_recipes

    host = _host(dirs)
    rows = []
    for recipe in all_recipes(dirs, warn=_warn).values():
        report = backends.inspect(recipe.backends, host, deep=False)
        missing = toolchain.problems(host.toolchain, recipe.tools) + [c.line() for c in report.failures]
        rows.append(recipe.to_json() | {"buildable": not missing, "missing": missing, "file": recipe.source_file})
    if args.json:
        print(json.dumps({"recipes": rows}, indent=2))
        return 0
    table = _table("recipe", "backends", "buildable here", "description")
    for row in rows:
        verdict = "[green]yes[/]" if row["buildable"] else "[red]no[/]: " + escape("; ".join(row["missing"]))
        table.add_row(row["name"], ", ".join(row["backends"]), verdict, row["description"])
    _out().print(table)
    return 0


def cmd_doctor(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import backends, toolchain

    host = _host(dirs)
    checks = [
        backends.Check(
            "build",
            tool.name,
            tool.found,
            f"{tool.version or 'not found'} {tool.path or ''}".strip(),
            "" if tool.found else toolchain.INSTALL_HINTS.get(tool.name, ""),
        )
        for tool in host.toolchain.tools().values()
    ]
    checks += backends.inspect(backends.known_backends(), host).checks
    if args.json:
        print(json.dumps({"checks": [dataclasses.asdict(c) for c in checks]}, indent=2))
    else:
        table = _table("check", "ok", "found", "fix")
        for check in checks:
            table.add_row(
                f"{check.backend}: {check.what}",
                "[green]yes[/]" if check.ok else "[red]no[/]",
                escape(check.found),
                "" if check.ok else escape(check.fix),
            )
        _out().print(table)
    basics = toolchain.problems(host.toolchain, ("cc", "c++"))
    return 1 if basics else 0


def _read_capture(path: Path | None, what: str) -> str:
    if path is None:
        return ""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise UserError(f"cannot read {what} file {path}: {err.strerror or err}") from None


def _env_assignments(items: list[str]) -> dict[str, str]:
    from buildmgr.backends import enumeration_variables

    known = enumeration_variables()
    assignments = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in known:
            raise UserError(f"--env takes NAME=VALUE with NAME one of {', '.join(known)}; got {item!r}")
        assignments[name] = value
    return assignments


def cmd_devices(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import identity, inventory, probe, store

    if args.parse is not None:
        devices = probe.parse_list_devices(_read_capture(args.parse, "--parse"))
        vulkan = probe.parse_vulkaninfo_summary(_read_capture(args.vulkaninfo, "--vulkaninfo"))
        nvidia = probe.parse_nvidia_smi_csv(_read_capture(args.nvidia_smi, "--nvidia-smi"))
        resolved, notes = identity.resolve(devices, nvidia, vulkan)
        if args.suggest:
            raise UserError("--suggest needs builds, and a capture has no builds: leave out --parse")
        if args.json:
            print(json.dumps({"devices": [d.to_json() for d in resolved], "notes": notes}, indent=2, sort_keys=True))
        else:
            _devices_table(resolved, {}, notes)
        return 0
    if args.env:
        environ = dict(os.environ) | _env_assignments(args.env)
        data = inventory.preview(store.installed(dirs), environ)
        _warn("preview under " + " ".join(f"{k}={v}" for k, v in (data.preview_env or {}).items()) + " (not stored)")
    else:
        data = None if args.refresh else inventory.read(dirs, _warn)
        builds = store.installed(dirs)
        if data is None or set(data.builds) != {b.id for b in builds}:
            ensure_writable(dirs.inventory, "set XDG_DATA_HOME to a writable directory")
            data = inventory.refresh(dirs, builds, _warn)
        for change in inventory.environment_changes(data.builds, dict(os.environ)):
            _warn(change)
    if args.suggest:
        return _suggest(data, args.prefer, args.json)
    if args.json:
        print(json.dumps(data.to_json(), indent=2, sort_keys=True))
    else:
        _devices_table(list(data.devices), data.builds, list(data.notes))
    return 0


def _suggest(data: Inventory, prefer: str, as_json: bool) -> int:
    from buildmgr import inventory, placement

    suggestions = {}
    for build_id, entry in sorted(data.builds.items()):
        devices = inventory.build_devices(data, build_id)
        names, shares = placement.suggest(devices, entry.default_selection, prefer)
        suggestions[build_id] = {"devices": names, "tensor_split": shares}
        flags = f"-dev {','.join(names)}" + (f" -ts {','.join(map(str, shares))}" if len(names) > 1 else "")
        if not as_json:
            kind = {"dgpu": "discrete GPU", "igpu": "iGPU", "all": "GPU"}[prefer]
            _out().print(f"{build_id}: {flags if names else f'no {kind} here'}", markup=False)
    if as_json:
        print(json.dumps({"prefer": prefer, "builds": suggestions}, indent=2))
    return 0


def _devices_table(devices: list[Device], builds: dict[str, BuildEntry], notes: list[str]) -> None:
    groups: dict[str, list[Device]] = {}
    for device in devices:
        groups.setdefault(device.physical_id, []).append(device)
    table = _table("physical device", "role", "PCI", "memory", *builds)
    for members in groups.values():
        first = members[0]
        memory = max((m.memory_total_mib for m in members if m.memory_total_mib is not None), default=None)
        pci = next((m.pci_bus_id for m in members if m.pci_bus_id), None) or "—"
        row = [escape(first.description), first.type, pci, f"{memory} MiB" if memory is not None else "?"]
        for entry in builds.values():
            seen = {d.name for d in entry.devices}
            names = [
                m.name + ("*" if entry.default_selection.get(m.name, "").startswith("used") else "")
                for m in members
                if m.name.split("@")[0] in seen
            ]
            built = {m.backend for m in members} & set(entry.backends)
            row.append(", ".join(names) if names else "[yellow]built ≠ present[/]" if built else "—")
        if not builds:
            row[0] = f"{escape(first.description)} [dim]({', '.join(m.name for m in members)})[/]"
        table.add_row(*row)
    if groups:
        _out().print(table)
        if builds:
            _out().print("[dim]* the name llama.cpp uses for that card when no -dev is given[/]")
    else:
        _out().print(
            "no devices besides the CPU" + (" in any build" if builds else " (no builds yet: run 'buildmgr build')")
        )
    for note in notes:
        _out().print(f"• {escape(note)}")


def cmd_matrix(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import artifacts, source
    from buildmgr.options import all_recipes

    known = all_recipes(dirs, "+".join(args.recipes), warn=_warn)
    request = artifacts.MatrixRequest(
        tuple(args.recipes or sorted(known)),
        tuple(args.sm),
        tuple(args.gfx),
        tuple(args.os or ["linux"]),
        tuple(args.cpu_arch or ["x64"]),
    )
    pin = source.load_pin()
    entries, skipped = artifacts.matrix(request, known, pin.build_number, pin.commit)
    reasons = [f"{s['recipe']} on {s['os']}/{s['cpu_arch']}: {s['reason']}" for s in skipped]
    if not entries:
        raise UserError(f"nothing in this matrix can be built: {'; '.join(reasons)}")
    for reason in reasons:
        _err().print(f"left out {reason}", markup=False, style="yellow")
    for entry in entries:
        if entry["native_cpu"]:
            _err().print(
                f"note: {entry['recipe']} builds with GGML_NATIVE=ON: its artifact runs only on CPUs like the runner's; "
                "universal builds every CPU variant",
                markup=False,
                style="yellow",
            )
    if args.format == "github":
        print(json.dumps({"include": entries}, separators=(",", ":")))
    else:
        print(json.dumps({"include": entries, "skipped": skipped}, indent=2))
    return 0


def cmd_package(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import artifacts, store

    build = store.find(dirs, args.build)
    out_dir = args.output.resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"-o {args.output}: not a directory")
    with _err().status(f"packaging {build.id} …"):
        packaged = artifacts.package(build, out_dir, dict(os.environ))
    needs = build.receipt.runtime  # package() refuses a build without it
    ccache = build.receipt.ccache or {}
    compiled = ccache.get("hits", 0) + ccache.get("misses", 0)
    result = {
        "id": build.id,
        "archive": str(packaged.archive),
        "checksum_file": str(packaged.checksum),
        "sha256": packaged.sha256,
        "size": packaged.size,
        "recipe": build.recipe,
        "backends": list(build.receipt.backends),
        "smoke_passed": build.receipt.smoke.passed,
        "smoke_devices": list(build.receipt.smoke.devices),
        "ccache_hit_rate": round(ccache["hits"] / compiled, 3) if compiled else None,
        "glibc": needs.glibc,
        "needed": sorted(needs.needed),
        "cuda": [*needs.cuda_sass, *needs.cuda_ptx],
        "hip": list(needs.hip_targets),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _out().print(f"{packaged.archive} ({packaged.size / 1e6:.1f} MB)", markup=False)
        _out().print(f"{packaged.checksum}  sha256 {packaged.sha256}", markup=False)
        _out().print(
            f"needs: glibc ≥ {result['glibc'] or '?'}; {', '.join(result['needed']) or 'no other libraries'}"
            + (f"; CUDA {' '.join(result['cuda'])}" if result["cuda"] else "")
            + (f"; HIP {' '.join(result['hip'])}" if result["hip"] else ""),
            markup=False,
        )
    return 0


def cmd_install_artifact(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import artifacts, hostfacts
    from buildmgr.progress import Reporter

    artifact = artifacts.open_artifact(args.file)
    findings = artifacts.host_findings(artifact.receipt, dict(os.environ), hostfacts.read().machine)
    errors = [line for severity, line in findings if severity == "error"]
    for severity, line in findings:
        _err().print(f"{severity}: {line}", markup=False, style="red" if severity == "error" else "yellow")
    if errors:
        raise BuildFailed(f"this host cannot run {args.file.name}: {errors[0]}; nothing was installed")
    ensure_writable(dirs.data, "set XDG_DATA_HOME to a writable directory")
    ensure_writable(dirs.cache, "set XDG_CACHE_HOME to a writable directory")
    outcome = artifacts.install(dirs, artifact, findings, Reporter(), dict(os.environ))
    if outcome.already:
        _err().print(f"already installed: {outcome.build.id} ({outcome.build.prefix})")
        devices = None
    else:
        _err().print(f"installed {outcome.build.id} → {outcome.build.prefix}", markup=False)
        devices = _probe_after_build(dirs, outcome.build)
    if args.json:
        result = {"id": outcome.build.id, "prefix": str(outcome.build.prefix), "already_installed": outcome.already}
        print(json.dumps(result | {"warnings": list(outcome.warnings), "devices": devices}, indent=2))
    return 0


def cmd_verify(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import artifacts, compile_cache
    from buildmgr.progress import Reporter

    artifact = artifacts.open_artifact(args.file)
    ensure_writable(dirs.cache, "set XDG_CACHE_HOME to a writable directory")
    result = artifacts.verify(dirs, artifact, dict(os.environ), Reporter(), args.cold)
    if args.json:
        print(
            json.dumps(
                {"id": result.build_id, "files": result.files, "differ": list(result.differ), "ccache": result.ccache},
                indent=2,
            )
        )
    if result.differ:
        raise BuildFailed(
            f"{args.file.name} is not what its receipt builds: {len(result.differ)} of {result.files} files differ: "
            + ", ".join(result.differ)
        )
    _err().print(
        f"verified: all {result.files} files of {args.file.name} are what its receipt builds here; "
        f"{compile_cache.summary(result.ccache)}",
        markup=False,
        style="green",
    )
    return 0


def cmd_cache(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import compile_cache, toolchain
    from buildmgr.config import Settings

    settings = Settings.load(dirs, dict(os.environ))
    ccache = toolchain.ccache_path(settings.ccache)
    if ccache is None:
        raise UserError(f"no ccache to ask: {toolchain.INSTALL_HINTS['ccache']}")
    result = {"ccache": ccache, "dir": str(dirs.ccache), "remote": settings.remote_cache}
    result |= compile_cache.totals(ccache, str(dirs.ccache), dict(os.environ))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for key, value in result.items():
        _out().print(f"{key:14} {'none' if value is None else value}", markup=False)
    return 0


def cmd_source(args: argparse.Namespace, dirs: Dirs) -> int:
    from buildmgr import source

    pin = source.load_pin()
    tree = source.pinned_tree(pin, dirs)
    if args.action == "sync":
        if args.archive is not None and not args.archive.is_file():
            raise UserError(f"--archive {args.archive}: no such file")
        ensure_writable(dirs.data, "set XDG_DATA_HOME to a writable directory")
        ensure_writable(dirs.cache, "set XDG_CACHE_HOME to a writable directory")
        target = source.vendor_dir() if args.vendor else None
        with _err().status(f"fetching and verifying {pin.requirement} …"):
            tree = source.sync_pinned(pin, dirs, args.archive, target)
        _err().print(f"synced llama.cpp {tree.short_commit} → {tree.path}")
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
        "synced": source.is_synced(tree, pin),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for key, value in info.items():
            _out().print(f"{key:14} {value}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="buildmgr", description="Build llama.cpp for ggml backends into proven, versioned prefixes.")
    parser.add_argument("--version", action="version", version=f"buildmgr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("build", help="build a recipe (default cpu); a no-op if that exact build exists")
    p.add_argument("recipe", nargs="?", default="cpu", help="recipe, or recipes joined with '+'")
    p.add_argument(
        "--sm", help="CUDA compute capabilities, e.g. 86 or 86,89 or 8.6 or native (default: this host's GPUs)"
    )
    p.add_argument("--gfx", help="AMD GPU targets for HIP, e.g. gfx1100,gfx1151 (default: this host's GPUs)")
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
    p.add_argument("--rebuild", action="store_true", help="build even if the identical prefix exists")
    p.add_argument(
        "--configure-only",
        action="store_true",
        help="preflight, configure and prove the backends are in, without compiling or publishing",
    )
    p.add_argument("--json", action="store_true", help="print the build id, prefix and devices seen as JSON")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("list", help="installed builds")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("which", help="path of a build's prefix, or of one of its tools")
    p.add_argument("build", help="build id, or a recipe name for its newest build")
    p.add_argument("tool", nargs="?")
    p.set_defaults(func=cmd_which)

    p = sub.add_parser("run", help="run a tool of a build: buildmgr run BUILD [--check] -- TOOL ARGS…")
    p.add_argument("build")
    p.add_argument("--check", action="store_true", help="check the placement flags first; run only if nothing fails")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "check", help="check llama.cpp placement flags against this host's devices: buildmgr check BUILD -- TOOL ARGS…"
    )
    p.add_argument("build")
    p.add_argument(
        "--verify", action="store_true", help="prove it: run llama-bench with the same placement, tiny model"
    )
    p.add_argument(
        "--model", type=Path, help="a GGUF model: weights per device from its header; --verify runs it -p 1 -n 1"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("remove", help="remove a build")
    p.add_argument("build")
    p.set_defaults(func=cmd_remove)

    p = sub.add_parser("gc", help="remove stale staging dirs and build trees of removed builds")
    p.set_defaults(func=cmd_gc)

    p = sub.add_parser("recipes", help="recipes, their backends, and whether this host can build them")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_recipes)

    p = sub.add_parser("doctor", help="every toolchain check for every backend, with fixes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("devices", help="the devices each build really sees on this host, grouped by physical card")
    p.add_argument("--refresh", action="store_true", help="probe every build again")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="preview the names under another enumeration environment (e.g. CUDA_VISIBLE_DEVICES=1): a fresh probe, not stored",
    )
    p.add_argument(
        "--suggest",
        action="store_true",
        help="a -dev string per build that uses each physical card once (and -ts by free memory)",
    )
    p.add_argument("--prefer", choices=("dgpu", "all", "igpu"), default="dgpu", help="with --suggest: which cards")
    p.add_argument("--parse", type=Path, metavar="FILE", help="parse a captured --list-devices output instead")
    p.add_argument("--vulkaninfo", type=Path, metavar="FILE", help="with --parse: a captured 'vulkaninfo --summary'")
    p.add_argument(
        "--nvidia-smi",
        type=Path,
        metavar="FILE",
        help="with --parse: a captured 'nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv'",
    )
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("source", help="fetch and verify the pinned source, or show it")
    p.add_argument("action", choices=("sync", "show"))
    p.add_argument("--archive", type=Path, help="with sync: use this already downloaded sdist (verified all the same)")
    p.add_argument("--json", action="store_true", help="with show: print JSON")
    p.add_argument(
        "--vendor",
        action="store_true",
        help="with sync: extract the verified tree into this checkout's vendor/llama.cpp (build it with --source)",
    )
    p.set_defaults(func=cmd_source)

    p = sub.add_parser("verify", help="rebuild an artifact from its receipt here and compare every file")
    p.add_argument("file", type=Path, help="llama-…-bin-….tar.gz with its .sha256 beside it")
    p.add_argument("--cold", action="store_true", help="compile everything: no local compile cache either")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("cache", help="the compile cache: totals of hits and misses, local and remote")
    p.add_argument("action", choices=("stats",))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cache)

    p = sub.add_parser("matrix", help="a GitHub Actions matrix of builds for CI runners: fromJSON() ready")
    p.add_argument("recipes", nargs="*", metavar="RECIPE", help="recipes or '+' combinations (default: every recipe)")
    p.add_argument(
        "--sm", action="append", default=[], help="CUDA capabilities of one variant, e.g. 86,89 (repeat for more)"
    )
    p.add_argument("--gfx", action="append", default=[], help="HIP targets of one variant, e.g. gfx1100 (repeatable)")
    p.add_argument("--os", action="append", choices=("linux", "macos"), help="default linux (repeatable)")
    p.add_argument("--cpu-arch", action="append", choices=("x64", "arm64"), help="default x64 (repeatable)")
    p.add_argument("--format", choices=("github", "json"), default="json", help='github: one line {"include": …}')
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("package", help="a byte-identical .tar.gz of a build, with its .sha256 beside it")
    p.add_argument("build")
    p.add_argument("-o", "--output", type=Path, default=Path("."), help="directory for the archive (default: .)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_package)

    p = sub.add_parser(
        "install-artifact", help="verify an artifact and this host, then install it as a build and smoke-run it"
    )
    p.add_argument("file", type=Path, help="llama-…-bin-….tar.gz with its .sha256 beside it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_install_artifact)
    return parser


def one_line(text: str) -> str:
    """A message that quotes the user's input stays one printable line: a newline, a NUL or an undecodable byte in
    that input is shown escaped."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        return args.func(args, Dirs.from_environment())
    except BuildFailed as err:
        for hint in err.hints:
            _err().print(f"likely fix: {hint}", markup=False, style="bold yellow")
        for line in err.tail:
            _err().print(f"  {line}", markup=False)
        _err().print(f"buildmgr: error: {one_line(str(err))}", markup=False)
        if err.log is not None:
            _err().print(f"full log: {err.log}", markup=False)
        return err.exit_code
    except BuildmgrError as err:
        _err().print(f"buildmgr: error: {one_line(str(err))}", markup=False)
        return err.exit_code
    except KeyboardInterrupt:
        _err().print("buildmgr: interrupted")
        return 130
    except BrokenPipeError:  # `buildmgr list --json | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as err:  # disk full, read-only file system, permission, not a directory …: one line, the path
        paths = [str(p) for p in (err.filename, err.filename2) if p]
        where = f": {' → '.join(paths)}" if paths else ""
        message = f"{err.strerror or err}{where}; check that path and the free space"
        _err().print(f"buildmgr: error: {one_line(message)}", markup=False)
        return 2
