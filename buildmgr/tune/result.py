"""What a tune found, as records: each candidate's entry (its state, why, the memory llama.cpp says it needs, its
speed per process), and the result (the winner, its commands, how it compares with llama.cpp's fit, the proof by
llama-server), with the plan's JSON."""

from __future__ import annotations

import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from buildmgr.bench import rows
from buildmgr.bench.stats import Ratio, RatioVerdict, geomean, ratio, t975
from buildmgr.tune import oracle, race, serve, space
from buildmgr.tune.config import TuneRequest


class RaceState(Enum):
    WINNER = "winner"
    FINALIST = "in the race at its end"
    RACED_OUT = "left the race"
    FAILED = "failed"
    PRUNED = "not run"


@dataclass
class RaceEntry:
    candidate: space.TuneCandidate
    state: RaceState = RaceState.PRUNED
    reason: str = ""
    need: dict[str, oracle.Need] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # what bench set for its runs (the pinning guard)
    # each process's figure (the objective's unit) by the round it ran in, over all the stages it raced in
    by_round: dict[int, float] = field(default_factory=dict)
    stage_units: tuple[float, ...] = ()  # those of the stage it races in now: a stage compares only these
    # those it ran as a stage's incumbent, which stays whatever it reads: chosen by no race, not the best of several
    held_units: tuple[float, ...] = ()
    versus_best: Ratio | None = None

    @property
    def units(self) -> tuple[float, ...]:
        return tuple(self.by_round.values())

    def to_json(self) -> dict[str, Any]:
        value = geomean(self.units) if self.units else None
        return self.candidate.to_json() | {
            "state": self.state.value,
            "reason": self.reason,
            "processes": len(self.units),
            "units": [figure(u) for u in self.units],
            "value": figure(value) if value else None,
            "versus_winner": self.versus_best.to_json() if self.versus_best else None,
            "need_mib": {name: n.to_json() for name, n in self.need.items()},
            "env_set": self.env,
        }

    def command(self, tool: Path, model: Path, ctx: int) -> str:
        """The tool's command line with its flags, and the environment its runs were measured with in front."""
        env = [f"{k}={v}" for k, v in sorted(self.env.items())]
        return shlex.join([*env, str(tool), "-m", str(model), "-c", str(ctx), *self.candidate.words])

    @property
    def name(self) -> str:
        """Its label with the environment its runs had beside it, as bench shows a CONFIG's."""
        env = " ".join(f"{k}={v}" for k, v in sorted(self.env.items()))
        return f"{self.candidate.label} [{env}]" if env else self.candidate.label


@dataclass(frozen=True)
class Tuned:
    request: TuneRequest
    build: str
    ctx: int
    entries: tuple[RaceEntry, ...]
    notes: tuple[str, ...]
    rounds: int
    seconds: float
    run_seconds: float  # the llama-bench processes of the race alone: the device time the race cost
    capacity_mib: dict[str, int | None]
    winner: RaceEntry | None
    rows_path: Path
    samples_path: Path  # every process's samples, as bench keeps them
    plan_path: Path
    commands: dict[str, str]
    winner_row: rows.Row | None
    served: serve.Served | None
    versus_fit: Ratio | None  # the winner over llama.cpp's fit where the two raced side by side

    @property
    def exit_code(self) -> int:
        """1 where nothing won or the winner did not serve."""
        return int(self.winner is None or (self.served is not None and self.served.failure is not None))

    def to_json(self) -> dict[str, Any]:
        winner = self.winner
        meta = self.winner_row.meta if self.winner_row is not None else None
        memory = {}
        if winner is not None:
            for name, n in winner.need.items():
                room = self.capacity_mib.get(name)
                memory[name] = n.to_json() | {
                    "may_hold": room,
                    "headroom": room - n.total if room is not None else None,
                }
        versus = self.versus_fit
        return {
            "build": self.build,
            "model": str(self.request.model),
            "objective": self.request.objective.value,
            "unit": self.request.objective.unit,
            "depth": self.request.depth,
            "ctx": self.ctx,
            "memory_emulated_mib": self.request.memory_mib,
            "winner": None
            if winner is None
            else {
                "label": winner.candidate.label,
                "flags": list(winner.candidate.words),
                "commands": self.commands,
                "value": interval_json(winner.units),
                "limit_percent": meta.limit_percent if meta else None,
                "j_per_token": meta.j_per_token if meta else None,
                "validity": meta.validity.value if meta else None,
                "memory_mib": memory,
                "versus_fit": versus.to_json() if versus else None,
            },
            "served": self.served.to_json() if self.served else None,
            "candidates": [e.to_json() for e in self.entries],
            "rounds": self.rounds,
            "seconds": round(self.seconds, 1),
            "run_seconds": round(self.run_seconds, 1),
            "notes": list(self.notes),
            "rows": str(self.rows_path),
            "samples": str(self.samples_path),
            "plan": str(self.plan_path),
            "exit_code": self.exit_code,
        }


def figure(value: float) -> float:
    """Six significant figures: t/s in the tens of thousands and tokens per joule of 0.01 alike."""
    return float(f"{value:.6g}")


def interval_json(units: Sequence[float]) -> dict[str, Any]:
    """The geometric mean over processes with its 95 % interval (none from one process)."""
    logs = [math.log(u) for u in units]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return {"value": figure(math.exp(mean)), "low": None, "high": None, "processes": len(logs)}
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return {
        "value": figure(math.exp(mean)),
        "low": figure(math.exp(mean - half)),
        "high": figure(math.exp(mean + half)),
        "processes": len(logs),
    }


def side_by_side(base: RaceEntry, other: RaceEntry) -> Ratio | None:
    """`other` over `base` in the rounds both ran in: interleaved, in the same conditions (None where fewer than
    two)."""
    shared = [r for r in base.by_round if r in other.by_round]
    if len(shared) < 2:
        return None
    return ratio([base.by_round[r] for r in shared], [other.by_round[r] for r in shared])


# bench's own CPU beside llama.cpp's threads on every CPU from which the plan says so: 4.9 % was an H100 run's at 10
# samples a second, 31-34 % its run whose counter reads slowed every `-t 16` placement (docs/real-runs.md 2026-12-06)
SAMPLER_NOTABLE = 0.10


def sampler_load(shares: Sequence[tuple[str, float | None]]) -> str | None:
    """Where bench's own sampling took SAMPLER_NOTABLE of a CPU or more beside a candidate whose CPU computes with a
    thread on every CPU (its rows' observer_share), the plan says so: those candidates may have read slower than
    they run alone."""
    known = [(label, share) for label, share in shares if share is not None]
    if not known or (worst := max(known, key=lambda k: k[1]))[1] < SAMPLER_NOTABLE:
        return None
    return (
        f"bench's own sampling took up to {worst[1]:.1%} of a CPU ({worst[0]}) beside llama.cpp's threads on every "
        "CPU: where the CPU computes, those candidates may have read slower than they run alone"
    )


def unmeasured_against_fit(seed: RaceEntry, winner: RaceEntry) -> str | None:
    """Where llama.cpp's fit never ran (left out before the race, or failed), the winner beats nothing measured:
    said, with why."""
    if winner is seed or seed.state not in (RaceState.PRUNED, RaceState.FAILED):
        return None
    return f"llama.cpp's fit was not measured ({seed.reason or seed.state.value}): the winner is not compared with it"


def decide(raced: Sequence[RaceEntry], objective: str, incumbent: RaceEntry) -> RaceEntry | None:
    """The winner among those still in the race at its end (race.winner: the incumbent stays unless an interval
    shows something faster), and how each other finalist compares with it."""
    finalists = {e.candidate.label: e for e in raced if e.state is RaceState.FINALIST}
    if not finalists:
        return None
    standings = [race.Standing(label, e.stage_units, e is incumbent) for label, e in finalists.items()]
    chosen, over_seed = race.winner(standings)
    winner = finalists[chosen.label]
    winner.state, winner.versus_best = RaceState.WINNER, None  # a ratio from a stage it left is not against a winner
    lead = race.best(standings)
    if chosen is lead:
        winner.reason = f"best by {objective} over {len(winner.stage_units)} processes"
    else:
        ahead = f"{over_seed.text()}" if over_seed is not None else "one process each"
        held = "llama.cpp's fit" if winner.candidate.seed else winner.candidate.label
        undecided = RatioVerdict.ONE_RUN if over_seed is None else RatioVerdict.of(over_seed)  # None: one process each
        winner.reason = f"{held} stays: {lead.label} is ahead by {ahead}, {undecided.said}"
    for label, found in race.versus(standings, chosen):
        entry = finalists[label]
        entry.versus_best = found
        verdict = RatioVerdict.of(found)
        entry.reason = (
            f"{verdict.said} against {chosen.label}"
            if found is None or verdict is RatioVerdict.ONE_RUN
            else f"cannot tell from {chosen.label} ({found.text()})"
            if verdict is RatioVerdict.NOISE
            else f"{found.text()} of {chosen.label}"
        )
    return winner
