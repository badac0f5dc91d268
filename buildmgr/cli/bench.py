"""`buildmgr bench`: measure CONFIGs (a build and its placement flags) at matched depths, and `bench --compare`
rows of any earlier run or of llama-bench's own JSON."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr import backends
from buildmgr.bench.compare import FORMATS
from buildmgr.bench.config import DEFAULT_REQUEST, Workload
from buildmgr.bench.rows import RANKS
from buildmgr.cli import command, network_timeout_s, render
from buildmgr.core.config import Context
from buildmgr.core.errors import UserError

if TYPE_CHECKING:
    from buildmgr.bench.logs import Event
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    p = command(
        sub,
        "bench",
        run,
        "measure builds and placements at matched depth, proving which devices did the work",
        json=True,
        about="Measure prefill and decode of one model under each CONFIG (a build and its placement flags) with "
        "the build's own llama-bench, at each depth, in interleaved processes after a warm-up, keeping every "
        "sample. Each row says whether the devices the CONFIG names did the work (engine readings and where each "
        "op ran), the share it reached of the memory-bandwidth limit, and every environment variable bench set "
        "for it; verdicts compare CONFIGs only where the intervals support it. Rows are kept under "
        "<data>/bench/; --compare reads them again.",
        example="buildmgr bench -m m.gguf 'one=cuda -dev CUDA0' 'two=cuda -dev CUDA0,CUDA1'\n"
        "buildmgr bench --compare ~/.local/share/buildmgr/bench/*.jsonl --by host",
    )
    p.add_argument(
        "configs", nargs="*", metavar="CONFIG", help="'[LABEL=]BUILD [FLAGS…]', e.g. 'cuda0=cuda -dev CUDA0'"
    )
    p.add_argument("-m", "--model", type=Path, help="the GGUF model every CONFIG runs")
    p.add_argument(
        "--config-file", type=Path, metavar="TOML", help="CONFIGs as [[config]] tables (build, label, flags)"
    )
    defaults = DEFAULT_REQUEST
    depths = ",".join(map(str, defaults.workload.depths))
    p.add_argument(
        "--depth", help=f"depths in tokens, comma-separated (default {depths}, clipped to the model's context)"
    )
    p.add_argument("-p", "--n-prompt", type=int, help=f"prefill tokens per test (default {defaults.workload.n_prompt})")
    p.add_argument("-n", "--n-gen", type=int, help=f"decoded tokens per test (default {defaults.workload.n_gen})")
    p.add_argument("--no-pg", action="store_true", help="leave out prefill+decode in one context (-pg)")
    p.add_argument(
        "--runs",
        type=int,
        help=f"llama-bench processes per CONFIG, interleaved (default {defaults.workload.runs})",
    )
    p.add_argument(
        "-r",
        "--repetitions",
        type=int,
        help=f"timed repetitions in each process, the first kept apart (default {defaults.workload.repetitions})",
    )
    p.add_argument(
        "--warmup",
        type=int,
        help="untimed llama-bench processes per CONFIG before the timed ones, kept apart "
        f"(default {defaults.workload.warmup})",
    )
    p.add_argument("--interval", type=float, help=f"seconds between engine samples (default {defaults.interval:g})")
    p.add_argument("--timeout", type=float, help=f"seconds one run may take (default {defaults.timeout:g})")
    p.add_argument("--allow-busy", action="store_true", help="run although other processes use the GPUs")
    p.add_argument(
        "--allow-pinned",
        action="store_true",
        help="let CPU-override CONFIGs page-lock host memory (by default "
        + ", ".join(f"{k}={v}" for k, v in backends.pinning_guards(backends.known_backends()).items())
        + " is set for them)",
    )
    p.add_argument(
        "--remeasure-cpu",
        action="store_true",
        help="measure the CPU's memory bandwidth again (it is measured once per host and kept)",
    )
    p.add_argument("--plot", type=Path, metavar="PNG", help="tokens/s against depth (needs buildmgr[plot])")
    p.add_argument("--compare", type=Path, nargs="+", metavar="FILE", help="compare rows of these files instead")
    p.add_argument(
        "--by",
        help="with --compare: the axis (config, build, devices, split_mode, overrides, depth, host; default config)",
    )
    p.add_argument("--baseline", help="with --compare: the value of the axis the others are compared with")
    p.add_argument(
        "--rank",
        choices=RANKS,
        help="with --compare: order each test's values best first by t/s or by J/token (default: as read)",
    )
    p.add_argument("--format", choices=FORMATS, help=f"with --compare (default {FORMATS[0]})")


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.compare:
        return compare(args)
    # options of --compare alone are refused here rather than ignored: the user asked for something not done
    stray = [f"--{name}" for name in ("by", "baseline", "rank", "format") if getattr(args, name) is not None]
    if stray:
        raise UserError(f"{', '.join(stray)}: only with bench --compare FILE… (leave out, or add --compare)")
    from buildmgr.bench import compare as paired
    from buildmgr.bench import config as cfg
    from buildmgr.bench import plot, rows, runner
    from buildmgr.bench import prepare as planning
    from buildmgr.bench.judge import Validity

    asked = cfg.Asked(
        tuple(args.configs),
        args.config_file,
        args.model,
        args.depth,
        args.n_prompt,
        args.n_gen,
        not args.no_pg,
        args.runs,
        args.repetitions,
        args.warmup,
        args.interval,
        args.timeout,
        args.allow_busy,
        args.allow_pinned,
        args.remeasure_cpu,
    )
    request, notes = planning.prepare(asked, (lambda: plot.require(args.plot)) if args.plot else lambda: None)
    request = dataclasses.replace(request, network_timeout=network_timeout_s(ctx))
    status = _Status(request.workload)
    with status:
        result = runner.bench(ctx.dirs, request, ctx.environ, render.say, notes, status.update)
    if args.plot:
        plot.plot(result.rows, args.plot)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return result.exit_code
    print(paired.render(paired.compare(result.rows, "config"), "config", "md"))
    for row in result.rows:
        meta = row.meta
        assert meta is not None  # rows of this call carry buildmgr's part
        label = f"{meta.config}: {rows.test_name(row.fields)}"
        if meta.validity is not Validity.VALID:
            render.say(f"{meta.validity.value}: {label}: " + "; ".join(meta.evidence), "yellow")
        if meta.noisy:
            render.warn(f"noisy: {label}: CV {meta.summary['cv'] * 100:.1f} % over {meta.summary['n']} samples")
        for note in meta.notes:
            render.say(f"note: {label}: {note}")
    for label, warnings in {r.config: r.meta.warnings for r in result.rows if r.meta}.items():
        for warning in warnings:
            render.warn(f"warning: {label}: {warning}")
    for line in result.verdicts:
        print(line)
    render.say(f"rows: {result.path}; samples: {result.samples_path}" + (f"; plot: {args.plot}" if args.plot else ""))
    return result.exit_code


class _Status:
    """In a terminal, a live line: CONFIG, run, the test and depth now running, seconds in."""

    def __init__(self, workload: Workload) -> None:
        from buildmgr.bench.rows import test_name

        self.tests = [test_name({"n_prompt": p, "n_gen": n, "n_depth": d}) for p, n, d in workload.tests()]
        console = render.err()
        self.live = console.status("") if console.is_terminal else None

    def __enter__(self) -> _Status:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, label: str, round_: int, event: Event) -> None:
        if self.live is not None:
            test = self.tests[event.test - 1] if 0 < event.test <= len(self.tests) else f"test {event.test}"
            self.live.update(f"{label} · run {round_} · {test}: {event.what}")


def compare(args: argparse.Namespace) -> int:
    from buildmgr.bench import compare as paired
    from buildmgr.bench import plot, rows

    if args.configs or args.model:
        raise UserError("--compare reads files only: leave out CONFIGs and -m")
    if args.plot:
        plot.require(args.plot)
    found = rows.read_rows(args.compare)
    axis = args.by or "config"
    table = paired.compare(found, axis, args.baseline, args.rank)
    print(paired.render(table, axis, "json" if args.json else args.format or FORMATS[0]))
    for note in paired.unpaired(found, axis):
        render.say(f"note: {note}")
    if args.plot:
        plot.plot(found, args.plot)
        render.say(f"plot: {args.plot}")
    return 0
