"""What one llama-bench process measured on tune's objective: its steady decode or prefill tokens/s, or, for energy,
its tokens per joule (the race keeps "higher is better"; J/token is shown beside it), over the same repetitions as
its speed and from the same readings bench takes its J/token from."""

from __future__ import annotations

from dataclasses import dataclass

from buildmgr.bench import energy, limit
from buildmgr.bench.aggregate import cpu_computes, steady_phases
from buildmgr.bench.prepare import Planned
from buildmgr.bench.process import Run, test_key
from buildmgr.bench.stats import geomean
from buildmgr.tune.space import Objective


@dataclass(frozen=True)
class Figure:
    value: float | None  # in the objective's unit; None: not measured, and why
    why: str = ""
    too_short: bool = False  # counters or power were read, but the test's phases were too short for them: the
    # workload's fault
    basis: str = ""  # for energy: where the joules came from (a counter, or power readings × time), each source once


def speed(run: Run, test: tuple[int, int, int]) -> float | None:
    """The process's steady speed on the test: the geometric mean of its repetitions, the first kept apart (it
    still pays warm-up inside the process)."""
    tokens = test[0] + test[1]
    for row in run.rows:
        if test_key(row) == test:
            steady = [tokens * 1e9 / ns for ns in (row.get("samples_ns") or [])[1:] if ns > 0]
            return geomean(steady) if steady else None
    return None


def tokens_per_joule(run: Run, planned: Planned, test: tuple[int, int, int]) -> Figure:
    """Tokens per joule of the test's steady repetitions over every device that worked (the CPU where it computes),
    or why it is not known: a device no sample read, or phases too short for what was read."""
    index = next((i for i, row in enumerate(run.rows, 1) if test_key(row) == test), None)
    if index is None:
        return Figure(None, "printed no result for the test")
    phases = steady_phases([p for p in run.phases if p.test == index])
    cpu_works = cpu_computes(planned, run.load)
    spent, joules = energy.of_test(planned.roles, phases, run.samples, test, cpu_works)
    if joules:
        return Figure(1 / joules, basis=", ".join(dict.fromkeys(e.basis for e in spent if e.joules is not None)))
    missing = [e for e in spent if e.joules is None and (cpu_works or e.device != limit.CPU)]
    unread = [e for e in missing if not e.too_short]
    if unread:
        return Figure(None, "its energy was not read (" + "; ".join(f"{e.device}: {e.unknown}" for e in unread) + ")")
    lasted = sum(p.end - p.start for p in phases)
    why = "; ".join(f"{e.device}: {e.unknown}" for e in missing)  # a counter's reason, or a power reading's
    return Figure(None, f"its steady repetitions lasted {lasted:.2f} s, too short to read ({why})", too_short=True)


def units(run: Run, planned: Planned, test: tuple[int, int, int], objective: Objective) -> Figure:
    """The process's figure on the objective (higher is better), or why there is none."""
    if objective is Objective.J_PER_TOKEN:
        return tokens_per_joule(run, planned, test)
    found = speed(run, test)
    return Figure(found, "" if found is not None else "printed no result for the test")
