"""`buildmgr tune`: the fastest honest placement of one model on this host, measured against llama.cpp's own fit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.cli import command, render
from buildmgr.core.config import Context
from buildmgr.tune import config
from buildmgr.tune.space import Objective

if TYPE_CHECKING:
    from buildmgr.cli import Subparsers
    from buildmgr.tune.result import Tuned


def register(sub: Subparsers, name: str) -> None:
    p = command(
        sub,
        "tune",
        run,
        "find the fastest placement of a model on this host that runs where it says, never slower than --fit",
        json=True,
        about="Try the placements of one model this host allows (each card under each of its names, split modes, "
        "-ts, layers or experts kept on the CPU where the model does not fit, FlashAttention on and off, -ub, "
        "threads), starting from llama.cpp's own --fit answer. Placements the check refuses, that llama.cpp "
        "estimates will not fit the memory each device may hold (--memory emulates a smaller card), or whose ops "
        "would run on the CPU are dropped with the reason; the rest race in rounds of llama-bench processes until "
        "an interval tells the fastest apart or the budget ends. The winner is served once by llama-server at the "
        "tuned context. Rows (bench's format) and the plan are kept under <data>/tune/.",
        example="buildmgr tune cuda -m model.gguf --depth 4096\n"
        "buildmgr tune cuda -m moe.gguf --memory CUDA0=24GiB --objective pp --budget 20",
    )
    p.add_argument("build", help="a build id or a recipe, as `buildmgr list` shows them")
    p.add_argument("-m", "--model", type=Path, required=True, help="the GGUF model to place")
    p.add_argument(
        "--objective",
        choices=[o.value for o in Objective],
        default=Objective.TG.value,
        help="what is made best: decode (tg) or prefill (pp) tokens/s at the depth, or decode's energy per token "
        "(j_per_token: needs an energy counter for every device that works, a GPU library's or the CPU's) (default tg)",
    )
    p.add_argument("--depth", type=int, default=config.DEFAULT_DEPTH, help="tokens already in the context (default 0)")
    p.add_argument(
        "-p", "--n-prompt", type=int, default=config.DEFAULT_N_PROMPT, help="prefill tokens per test (default 512)"
    )
    p.add_argument(
        "-n",
        "--n-gen",
        type=int,
        help=f"decoded tokens per test (default {config.DEFAULT_N_GEN}; {config.DEFAULT_N_GEN_ENERGY} for j_per_token)",
    )
    p.add_argument("--ctx", type=int, help="the context to serve (default: the depth and the test, rounded up)")
    p.add_argument(
        "--memory",
        nargs="+",
        default=[],
        metavar="DEV=SIZE",
        help="what a device (or CPU) may hold, e.g. CUDA0=24GiB: emulates a smaller card",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=config.DEFAULT_BUDGET_MIN,
        metavar="MINUTES",
        help=f"stop the race when the next round would pass this (default {config.DEFAULT_BUDGET_MIN:g})",
    )
    p.add_argument(
        "--max-runs",
        type=int,
        help=f"llama-bench processes per candidate at most (default {config.DEFAULT_MAX_RUNS}; with --grid, bench's 3)",
    )
    p.add_argument(
        "-r",
        "--repetitions",
        type=int,
        help=f"timed repetitions per process, the first kept apart (default {config.DEFAULT_REPETITIONS}; with --grid, "
        "bench's 6)",
    )
    p.add_argument("--interval", type=float, default=0.1, help="seconds between engine samples (default 0.1)")
    p.add_argument("--allow-busy", action="store_true", help="run although other processes use the GPUs")
    p.add_argument(
        "--allow-pinned", action="store_true", help="let candidates with CPU overrides page-lock host memory"
    )
    p.add_argument("--no-serve", action="store_true", help="leave out the proof by llama-server")
    p.add_argument(
        "--grid",
        action="store_true",
        help="race no one out: every candidate runs as bench runs a CONFIG (a warm-up process, then --max-runs): the "
        "exhaustive grid, to measure tune by",
    )


def run(args: argparse.Namespace, ctx: Context) -> int:
    from buildmgr.tune import runner

    runs, repetitions, warmup = config.shape_of_runs(args.grid, args.max_runs, args.repetitions)
    objective = Objective(args.objective)
    n_gen = config.n_gen_for(objective, args.n_gen)
    for value, flag, least in (
        (args.depth, "--depth", 0),
        (args.n_prompt, "-p", 1),
        (n_gen, "-n", 1),
        (runs, "--max-runs", 2),
        (repetitions, "-r", 2),
        (args.budget, "--budget", 0.1),
        (args.interval, "--interval", 0.01),
    ):
        config.at_least(value, flag, least)
    request = config.TuneRequest(
        args.build,
        args.model,
        objective,
        args.depth,
        args.n_prompt,
        n_gen,
        args.ctx,
        config.parse_memory(args.memory),
        args.budget * 60,
        runs,
        repetitions,
        args.interval,
        allow_busy=args.allow_busy,
        allow_pinned=args.allow_pinned,
        serve=not args.no_serve,
        grid=args.grid,
        warmup=warmup,
    )
    tuned = runner.tune(ctx.dirs, request, ctx.environ, render.say)
    if args.json:
        print(json.dumps(tuned.to_json(), indent=2))
    else:
        _print(tuned)
    return tuned.exit_code


def _print(tuned: Tuned) -> None:
    unit = tuned.request.objective.unit
    print(f"| candidate | state | {unit} | processes | why |")
    print("|---|---|---:|---:|---|")
    for entry in tuned.entries:
        data = entry.to_json()
        value = f"{data['value']:.4g}" if data["value"] else ""
        print(f"| {entry.name} | {entry.state.value} | {value} | {data['processes']} | {entry.reason} |")
    plan = tuned.to_json()
    winner = plan["winner"]
    if winner is None:
        render.warn("no candidate finished the race")
    else:
        found = winner["value"]
        interval = f" [{found['low']:.4g}, {found['high']:.4g}]" if found["low"] is not None else ""
        share = winner["limit_percent"]
        limit = f", {share:.1f} % of the bandwidth limit" if share else ""
        limit += " (above 100 %: the limit is wrong here)" if share and share > 100 else ""
        limit += f", {1 / found['value']:.4g} J/token" if unit != "t/s" and found["value"] else ""
        name = tuned.winner.name if tuned.winner else winner["label"]
        print(f"winner: {name}: {found['value']:.4g} {unit}{interval} ({tuned.request.objective.value}{limit})")
        versus = tuned.versus_fit
        if versus is not None and winner["label"] != "fit":
            from buildmgr.bench.stats import RatioVerdict

            verdict = RatioVerdict.of(versus)
            print(
                f"against llama.cpp's fit: {versus.text()}"
                + ("" if verdict is RatioVerdict.APART else f" ({verdict.said})")
            )
        for name, line in tuned.commands.items():
            print(f"{name}: {line}")
        for name, need in winner["memory_mib"].items():
            room = f" of {need['may_hold']} (headroom {need['headroom']})" if need["may_hold"] is not None else ""
            print(f"memory: {name}: {need['total']} MiB{room}")
    served = tuned.served
    if served is not None:
        if served.failure:
            render.warn(f"the winner did not serve: {served.failure}; log: {served.log}")
        else:
            print(f"served: {served.text()}")
    render.say(f"plan: {tuned.plan_path}; rows: {tuned.rows_path} (bench --compare reads them)")
