"""What one llama-bench process measured on tune's objective: its steady decode or prefill tokens/s, or, for energy,
its tokens per joule (the race keeps "higher is better"; J/token is shown beside it), over the same repetitions as
its speed and from the same readings bench takes its J/token from."""

from __future__ import annotations

from buildmgr.bench import limit
from buildmgr.bench.aggregate import steady_phases
from buildmgr.bench.judge import HOST, partial
from buildmgr.bench.prepare import Planned
from buildmgr.bench.process import Run, test_key
from buildmgr.bench.stats import geomean
from buildmgr.tune.space import Objective


def speed(run: Run, test: tuple[int, int, int]) -> float | None:
    """The process's steady speed on the test: the geometric mean of its repetitions, the first kept apart (it
    still pays warm-up inside the process)."""
    tokens = test[0] + test[1]
    for row in run.rows:
        if test_key(row) == test:
            steady = [tokens * 1e9 / ns for ns in (row.get("samples_ns") or [])[1:] if ns > 0]
            return geomean(steady) if steady else None
    return None


def tokens_per_joule(run: Run, planned: Planned, test: tuple[int, int, int]) -> tuple[float | None, str]:
    """Tokens per joule of the test's steady repetitions over every device that worked (the CPU where it computes),
    or None with why it is not known."""
    index = next((i for i, row in enumerate(run.rows, 1) if test_key(row) == test), None)
    if index is None:
        return None, "printed no result for the test"
    phases = steady_phases([p for p in run.phases if p.test == index])
    devices: dict[str, str | None] = {r.name: r.pci_bus_id for r in planned.roles if not r.on_cpu}
    devices[limit.CPU] = None  # the CPU's packages, by RAPL
    per_kind = {"prompt": test[0], "generation": test[1]}
    energy = limit.energy(phases, run.samples, devices, per_kind)
    cpu_works = planned.config.cpu_overrides or bool(partial(run.load)) or any(r.name == HOST for r in planned.roles)
    joules = limit.per_token(energy, phases, per_kind, cpu_works)
    if not joules:
        unknown = sorted({f"{e.device}: {e.unknown}" for e in energy if e.joules is None and e.unknown})
        return None, "its energy was not read (" + ("; ".join(unknown) or "no reading inside its phases") + ")"
    return 1 / joules, ""


def units(run: Run, planned: Planned, test: tuple[int, int, int], objective: Objective) -> tuple[float | None, str]:
    """The process's figure on the objective (higher is better), or None with why."""
    if objective is Objective.J_PER_TOKEN:
        return tokens_per_joule(run, planned, test)
    found = speed(run, test)
    return found, "" if found is not None else "printed no result for the test"
