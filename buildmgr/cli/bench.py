"""`buildmgr bench`: measure CONFIGs (a build and its placement flags) at matched depths, and `bench --compare`
rows of any earlier run or of llama-bench's own JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.cli import command, render
from buildmgr.config import Context
from buildmgr.errors import UserError

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers


def register(sub: Subparsers, name: str) -> None:
    p = command(
        sub,
        "bench",
        run,
        "measure builds and placements at matched depth, proving which devices did the work",
        json=True,
    )
    p.add_argument(
        "configs", nargs="*", metavar="CONFIG", help="'[LABEL=]BUILD [FLAGS…]', e.g. 'cuda0=cuda -dev CUDA0'"
    )
    p.add_argument("-m", "--model", type=Path, help="the GGUF model every CONFIG runs")
    p.add_argument(
        "--config-file", type=Path, metavar="TOML", help="CONFIGs as [[config]] tables (build, label, flags)"
    )
    p.add_argument("--depth", help="depths in tokens, comma-separated (default 0,4096, clipped to the model's context)")
    p.add_argument("-p", "--n-prompt", type=int, default=512, help="prefill tokens per test (default 512)")
    p.add_argument("-n", "--n-gen", type=int, default=128, help="decoded tokens per test (default 128)")
    p.add_argument("--no-pg", action="store_true", help="leave out prefill+decode in one context (-pg)")
    p.add_argument("--reps", type=int, default=5, help="kept runs per CONFIG, after a discarded first (default 5)")
    p.add_argument("--interval", type=float, default=0.1, help="seconds between engine samples (default 0.1)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds one run may take (default 1800)")
    p.add_argument("--allow-busy", action="store_true", help="run although other processes use the GPUs")
    p.add_argument(
        "--allow-pinned",
        action="store_true",
        help="let CPU-override CONFIGs page-lock host memory (by default "
        + ", ".join(f"{k}={v}" for k, v in backends.pinning_guards(backends.known_backends()).items())
        + " is set for them)",
    )
    p.add_argument("--plot", type=Path, metavar="PNG", help="tokens/s against depth (needs buildmgr[plot])")
    p.add_argument("--compare", type=Path, nargs="+", metavar="FILE", help="compare rows of these files instead")
    p.add_argument(
        "--by", default="config", help="with --compare: the axis (config, build, devices, split_mode, overrides, depth)"
    )
    p.add_argument("--baseline", help="with --compare: the value of the axis the others are compared with")
    p.add_argument("--format", choices=("md", "json", "csv"), default="md", help="with --compare (default md)")


def _positive(value: float, flag: str, minimum: float) -> None:
    if value < minimum:
        raise UserError(f"{flag} {value:g}: at least {minimum:g}")


def run(args: argparse.Namespace, ctx: Context) -> int:
    if args.compare:
        return compare(args)
    from buildmgr.bench import config as cfg
    from buildmgr.bench import plot, runner

    configs = [cfg.parse_config(text) for text in args.configs]
    if args.config_file:
        configs += cfg.read_toml(args.config_file)
    if not configs:
        raise UserError(f"name at least one CONFIG, e.g. {cfg.EXAMPLE}, or --config-file FILE.toml")
    cfg.unique_labels(configs)
    _positive(args.reps, "--reps", 1)
    _positive(args.n_prompt, "-p", 1)
    _positive(args.n_gen, "-n", 1)
    _positive(args.interval, "--interval", 0.01)
    _positive(args.timeout, "--timeout", 1)
    asked = cfg.parse_depths(args.depth) if args.depth is not None else None
    if args.plot:
        plot.require(args.plot)
    contexts = [runner.model_context(m) for m in dict.fromkeys(c.model(args.model) for c in configs)]
    n_ctx = min((c for c in contexts if c is not None), default=None)
    workload = cfg.Workload(args.n_prompt, args.n_gen, pg=not args.no_pg, reps=args.reps)
    depths, notes = cfg.fit_depths(asked or cfg.DEFAULT_DEPTHS, asked is not None, workload, n_ctx)
    workload = cfg.Workload(args.n_prompt, args.n_gen, depths, not args.no_pg, args.reps)
    request = runner.Request(
        args.model, tuple(configs), workload, args.interval, args.timeout, args.allow_busy, args.allow_pinned
    )
    status = _Status(workload)
    with status:
        result = runner.bench(ctx.dirs, request, ctx.environ, render.say, notes, status.update)
    if args.plot:
        plot.plot(result.rows, args.plot)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return result.exit_code
    from buildmgr.bench import rows
    from buildmgr.bench.judge import Validity

    print(rows.render(rows.compare(result.rows, "config"), "config", "md"))
    for row in result.rows:
        state = row[rows.KEY]
        label = f"{state['config']}: {rows.test_name(row)}"
        if state["validity"] != Validity.VALID.value:
            render.say(f"{state['validity']}: {label}: " + "; ".join(state["evidence"]), "yellow")
        if state["noisy"]:
            render.warn(f"noisy: {label}: CV {state['summary']['cv'] * 100:.1f} % over {state['summary']['n']} runs")
    for label, warnings in {r[rows.KEY]["config"]: r[rows.KEY]["warnings"] for r in result.rows}.items():
        for warning in warnings:
            render.warn(f"warning: {label}: {warning}")
    for line in result.verdicts:
        print(line)
    render.say(f"rows: {result.path}; samples: {result.samples_path}" + (f"; plot: {args.plot}" if args.plot else ""))
    return result.exit_code


class _Status:
    """In a terminal, a live line: CONFIG, run, the test and depth now running, seconds in."""

    def __init__(self, workload) -> None:
        from buildmgr.bench.rows import test_name

        self.tests = [test_name({"n_prompt": p, "n_gen": n, "n_depth": d}) for p, n, d in workload.tests()]
        console = render.err()
        self.live = console.status("") if console.is_terminal else None

    def __enter__(self):
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, label: str, round_: int, event) -> None:
        if self.live is not None:
            run = "warm-up" if round_ == 0 else f"run {round_}"
            test = self.tests[event.test - 1] if 0 < event.test <= len(self.tests) else f"test {event.test}"
            self.live.update(f"{label} · {run} · {test}: {event.what}")


def compare(args: argparse.Namespace) -> int:
    from buildmgr.bench import plot, rows

    if args.configs or args.model:
        raise UserError("--compare reads files only: leave out CONFIGs and -m")
    if args.plot:
        plot.require(args.plot)
    found = rows.read_rows(args.compare)
    table = rows.compare(found, args.by, args.baseline)
    print(rows.render(table, args.by, "json" if args.json else args.format))
    if args.plot:
        plot.plot(found, args.plot)
    return 0
