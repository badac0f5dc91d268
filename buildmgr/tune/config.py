"""What `tune` is asked, resolved once: the build, the model, the objective and depth, the context served, the
memory each device may hold (`--memory DEV=SIZE` emulates a smaller card), and how long the race may run. Every
tune default is declared here once. Pure."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from buildmgr.core import units
from buildmgr.core.errors import UserError
from buildmgr.tune.space import Objective

DEFAULT_DEPTH = 0
DEFAULT_N_PROMPT = 512
DEFAULT_N_GEN = 64  # decode tokens per test: each process repeats it, so fewer than bench's 128
# for energy: a GPU counter's timed updates must span 0.4 s of steady decode (bench.energy.MIN_TIMED_SECONDS) in
# every process: 3 steady repetitions of 320 tokens last 0.64 s at 1,500 t/s, their updates spanning 0.5 s or more
# where the counter steps every 0.1 s (an H100's), 0.4 s with one at either end not timed
DEFAULT_N_GEN_ENERGY = 320
# Processes per candidate at most: screening is one each, the finalists run until an interval tells them apart.
DEFAULT_MAX_RUNS = 4
# Timed repetitions per process, the first kept apart (as bench): three steady samples each.
DEFAULT_REPETITIONS = 4
DEFAULT_BUDGET_MIN = 30.0
CTX_STEP = 256  # the context served is rounded up to this
HOST_NAMES = ("CPU", "Host")  # --memory CPU=… limits what the host's memory may hold


@dataclass(frozen=True)
class TuneRequest:
    build: str
    model: Path
    objective: Objective = Objective.TG
    depth: int = DEFAULT_DEPTH
    n_prompt: int = DEFAULT_N_PROMPT
    n_gen: int = DEFAULT_N_GEN
    ctx: int | None = None  # the context served; None: depth and the test's tokens, rounded up
    memory_mib: dict[str, int] = field(default_factory=dict)  # device name (or CPU) → MiB it may hold
    budget_s: float = DEFAULT_BUDGET_MIN * 60
    max_runs: int = DEFAULT_MAX_RUNS
    repetitions: int = DEFAULT_REPETITIONS
    interval: float = 0.1
    allow_busy: bool = False
    allow_pinned: bool = False
    serve: bool = True  # prove the winner by llama-server
    grid: bool = False  # every candidate runs every round: the exhaustive grid tune's race is measured against
    warmup: int = 0  # untimed processes per candidate first (the grid's, as bench runs them)

    def context(self, trained: int | None) -> int:
        """The context the winner is served at: what was asked, else the depth with the test on top, rounded up to
        CTX_STEP; never past what the model was trained for."""
        if self.ctx is not None:
            if trained is not None and self.ctx > trained:
                raise UserError(f"--ctx {self.ctx}: the model's context is {trained}; use at most that")
            if self.ctx < self.depth + self.n_gen + 1:
                raise UserError(f"--ctx {self.ctx}: the depth {self.depth} and -n {self.n_gen} need more")
            return self.ctx
        need = self.depth + max(self.n_prompt, 1) + self.n_gen
        rounded = math.ceil(need / CTX_STEP) * CTX_STEP
        if trained is not None and need > trained:
            raise UserError(
                f"--depth {self.depth} with -p {self.n_prompt} -n {self.n_gen} passes the model's context of {trained}"
            )
        return min(rounded, trained) if trained is not None else rounded


def n_gen_for(objective: Objective, asked: int | None) -> int:
    if asked is not None:
        return asked
    return DEFAULT_N_GEN_ENERGY if objective is Objective.J_PER_TOKEN else DEFAULT_N_GEN


def shape_of_runs(grid: bool, max_runs: int | None, repetitions: int | None) -> tuple[int, int, int]:
    """Processes, repetitions and warm-up processes per candidate: the race's, or with --grid what bench would run
    for each CONFIG by default (what a user would run over the whole space instead)."""
    from buildmgr.bench import config as bench

    runs, reps = (bench.DEFAULT_RUNS, bench.DEFAULT_REPETITIONS) if grid else (DEFAULT_MAX_RUNS, DEFAULT_REPETITIONS)
    return (
        runs if max_runs is None else max_runs,
        reps if repetitions is None else repetitions,
        bench.DEFAULT_WARMUP if grid else 0,
    )


def parse_size(text: str, flag: str) -> int:
    """A size in MiB from '24GiB', '24G', '512MiB', '24000000000' (bytes)."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    size = (units.unit_bytes(found.group(2), any_case=True) if found.group(2) else 1) if found else None
    if found is None or size is None:
        raise UserError(f"{flag} {text!r}: a size such as 24GiB, 24G or 512MiB")
    mib = float(found.group(1)) * size / units.MIB
    if mib < 1:
        raise UserError(f"{flag} {text!r}: at least 1 MiB")
    return int(mib)


def parse_memory(items: list[str]) -> dict[str, int]:
    """`--memory DEV=SIZE …`: each device once."""
    found: dict[str, int] = {}
    for item in items:
        name, eq, size = item.partition("=")
        if not eq or not name:
            raise UserError(f"--memory {item!r}: write DEVICE=SIZE, e.g. --memory CUDA0=24GiB")
        if name in found:
            raise UserError(f"--memory names {name} twice: give each device once")
        found[name] = parse_size(size, f"--memory {name}=")
    return found


def at_least(value: float, flag: str, minimum: float) -> None:
    if value < minimum:
        raise UserError(f"{flag} {value:g}: at least {minimum:g}")
