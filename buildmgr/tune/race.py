"""The race between candidates, decided after each round of processes (one per candidate still in): the process is
the unit of repetition, as in bench. A candidate leaves when the best's interval excludes it (its ratio's upper
bound below 1) or, while more than `FINALISTS` remain, when it is outside the fastest third of one round
(successive halving: cheap screening, then processes for those that matter). The incumbent (llama.cpp's own fit in
the first stage, the winner so far in each later one) stays until an interval excludes it, and wins unless something
is seen to be faster, so every change from it is measured. Pure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from buildmgr.bench.stats import Ratio, geomean, ratio, t975

FINALISTS = 3  # below this many, no one leaves but by an interval
# Successive halving's rate (η): a third stays after each screening round, Hyperband's default; the incumbent besides.
KEPT = 3


# A decode within this share of its memory-bandwidth limit leaves nothing much faster to find; above it the limit is
# wrong (a model in the CPU's caches), and says nothing.
AT_LIMIT = (95.0, 105.0)


def at_limit(percent: float | None) -> bool:
    return percent is not None and AT_LIMIT[0] <= percent <= AT_LIMIT[1]


@dataclass(frozen=True)
class Standing:
    label: str
    units: tuple[float, ...]  # one per process: the geometric mean of its steady samples of the objective's test
    incumbent: bool = False

    @property
    def value(self) -> float:
        return geomean(self.units) if self.units else 0.0


@dataclass(frozen=True)
class Out:
    label: str
    reason: str
    ratio: Ratio | None  # its speed over the best's when it left, where it was measured


def speed(value: float) -> str:
    """A figure as tables show it: whole above 100, three figures below."""
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def holds(units: Sequence[float], fresh: float) -> bool:
    """Whether a fresh process reads as a candidate's earlier ones predict: inside their 95 % prediction interval on
    the log scale (a host whose speed moved between them is not)."""
    if len(units) < 2:
        return False
    logs = [math.log(u) for u in units]
    half = t975(len(logs) - 1) * statistics.stdev(logs) * math.sqrt(1 + 1 / len(logs))
    return abs(math.log(fresh) - statistics.fmean(logs)) <= half


def best(standings: Sequence[Standing]) -> Standing:
    return max(standings, key=lambda s: s.value)


def after_round(standings: Sequence[Standing], round_: int, unit: str = "t/s") -> list[Out]:
    """Who leaves the race after this round (1-based), each with why."""
    measured = [s for s in standings if s.units]
    if len(measured) < 2:
        return []
    lead = best(measured)
    out: list[Out] = []
    for other in measured:
        if other is lead or len(other.units) < 2 or len(lead.units) < 2:
            continue
        found = ratio(lead.units, other.units)
        if found is not None and found.high is not None and found.high < 1.0:
            behind = "slower than" if unit == "t/s" else "behind"
            n, m = len(lead.units), len(other.units)  # unequal where an incumbent stands on earlier processes
            over = f"{n}" if n == m else f"{n} and {m}"
            out.append(Out(other.label, f"{behind} {lead.label}: {found.text()} over {over} processes", found))
    left = [s for s in measured if s.label not in {o.label for o in out}]
    if len(left) > FINALISTS:
        ranked = sorted(left, key=lambda s: s.value, reverse=True)
        keep = max(FINALISTS, math.ceil(len(ranked) / KEPT))
        for other in ranked[keep:]:
            if other.incumbent:
                continue
            found = ratio(lead.units, other.units)
            out.append(
                Out(
                    other.label,
                    f"screened out in round {round_}: {speed(other.value)} {unit} against {lead.label}'s "
                    f"{speed(lead.value)} (outside the fastest third)",
                    found,
                )
            )
    return out


def winner(standings: Sequence[Standing]) -> tuple[Standing, Ratio | None]:
    """The winner of those still in when the race ends: the fastest, unless the incumbent is still in and the
    interval does not exclude it (then the incumbent: a change is recommended only where it is seen to be faster);
    with the fastest's ratio over the incumbent."""
    lead = best(standings)
    held = next((s for s in standings if s.incumbent), None)
    if held is None or held is lead:
        return lead, None
    found = ratio(held.units, lead.units)
    if found is None or found.low is None or found.low <= 1.0:
        return held, found
    return lead, found


def versus(standings: Sequence[Standing], chosen: Standing) -> list[tuple[str, Ratio | None]]:
    """How each of the others still in compares with the winner (inside the noise, or too few processes to tell)."""
    return [(s.label, ratio(chosen.units, s.units)) for s in standings if s is not chosen]
