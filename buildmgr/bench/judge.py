"""Did the devices of a placement do the work? Each timed phase of a test (prefill, decode) is judged from the samples
taken during it: a device of the placement that stayed idle, or a GPU outside it that worked, is a fallback; a phase
too short to sample, or a device nothing can read, leaves the result unproven, and says so. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import NamedTuple

from buildmgr.bench.logs import LoadLog, Phase
from buildmgr.bench.sampling import Sample

IDLE_PERCENT = 5.0  # a GPU at or below this through a long phase did not run it
BUSY_PERCENT = 20.0  # a GPU outside the placement above this on average in a phase ran part of it
CPU_WORKED = 0.1  # cores: a CPU-side device (the CPU, lavapipe) that used less than this did not run the phase
# CPU time counts in clock ticks (10 ms): a rate over a shorter window than this is too coarse to call anything idle
CPU_MIN_SECONDS = 0.1
# NVML's utilisation is the share of its last sampling period (up to a second) a kernel ran: a shorter phase can
# read 4 % on a GPU that ran all of it (tg128 in 112 ms on an H200, 2026-12-01), so only a phase this long can show
# a GPU idle (from its readings after the first second), and a shorter one is judged over its whole test.
MIN_IDLE_SECONDS = 1.0
# With part of the layers offloaded, a card works in bursts between the CPU's layers: an expected share of the phase's
# time below this reads as idle in sampled utilisation (-ngl 4 of 17 on an H200 read at most 1 %, issue #31), so its
# idle readings prove nothing.
RESOLVABLE_SHARE = 0.2


HOST = "CPU"  # the role of a placement with no device: llama.cpp's CPU backend itself


class Validity(Enum):
    VALID = "valid"
    FALLBACK = "invalid: fallback"
    UNPROVEN = "unproven"
    PARTIAL = "partial"  # measured, but ops of the device-placed layers ran on the CPU (coverage says which)
    FAILED = "failed"
    NOT_RUN = "not run"


class Placed(NamedTuple):
    """A device the placement gives work: a card matched to engine readings by PCI id, or one judged by the process's
    CPU time (the CPU itself, or a CPU-type device such as lavapipe). `waits` is set where the placement keeps weights
    on the CPU on purpose (-ot …=CPU, --cpu-moe): the card then idles while the CPU works, which is no fallback."""

    name: str
    pci_bus_id: str | None
    on_cpu: bool = False
    waits: bool = False


class Verdict(Enum):
    """What one device did in one phase."""

    WORKED = "worked"
    WORKED_OVER_TEST = "worked over the test"  # the phase was too short to sample; its test showed work
    IDLE = "idle"
    WAITING = "waiting"  # idle while the CPU ran the weights the placement keeps there
    TOO_SHORT = "too short"
    NOT_READABLE = "not readable"  # no reading matches the device
    BUSY_OUTSIDE = "busy outside the placement"
    UNRESOLVED = "idle, below what its share can show"  # partial offload: too small a share of the time to sample

    @property
    def unsure(self) -> bool:
        return self in (Verdict.TOO_SHORT, Verdict.NOT_READABLE, Verdict.UNRESOLVED)


class Work(NamedTuple):
    device: str
    phase: str  # prompt | generation
    readings: int
    busy: float | None  # GPU: the highest reading, percent; CPU side: cores used
    verdict: Verdict

    def to_json(self) -> dict[str, object]:
        return self._asdict() | {"verdict": self.verdict.value}


class Judgement(NamedTuple):
    validity: Validity
    evidence: tuple[str, ...]
    work: tuple[Work, ...]


def _window(samples: Sequence[Sample], start: float, end: float, interval: float) -> list[Sample]:
    """The samples of a span: a GPU's busy share covers the period before the reading, so one reading after the
    span's end still tells of it."""
    return [s for s in samples if start < s.at <= end + interval]


def _busy(window: Sequence[Sample], pci: str) -> list[float]:
    return [r.busy_percent for s in window for r in s.engines if r.pci_bus_id == pci and r.busy_percent is not None]


def _gpu_work(role: Placed, phase: Phase, samples: Sequence[Sample], timed: Sequence[Phase], interval: float) -> Work:
    assert role.pci_bus_id is not None
    values = _busy(_window(samples, phase.start, phase.end, interval), role.pci_bus_id)
    # readings in the phase's first second may still average the phase before it
    settled = _busy(_window(samples, phase.start + MIN_IDLE_SECONDS, phase.end, interval), role.pci_bus_id)
    if len(settled) >= 2:
        if max(settled) > IDLE_PERCENT:
            return Work(role.name, phase.kind, len(settled), max(settled), Verdict.WORKED)
        return Work(role.name, phase.kind, len(settled), max(settled), Verdict.WAITING if role.waits else Verdict.IDLE)
    # a phase too short to sample: the readings of the test's timed phases, never of its load or warm-up (issue #48)
    around = [v for p in timed for v in _busy(_window(samples, p.start, p.end, interval), role.pci_bus_id)]
    if around and max(around) > 0:
        return Work(role.name, phase.kind, len(around), max(around), Verdict.WORKED_OVER_TEST)
    return Work(role.name, phase.kind, len(values), max(values) if values else None, Verdict.TOO_SHORT)


def _cpu_rate(phases: Sequence[Phase], samples: Sequence[Sample]) -> tuple[int, float, float]:
    """Readings, seconds and CPU seconds between the first and last reading inside each of these phases, summed:
    never the time between them (a depth fill, the next repetition's set-up)."""
    readings, seconds, used = 0, 0.0, 0.0
    for phase in phases:
        inside = [
            (s.at, s.process.cpu_seconds)
            for s in samples
            if phase.start < s.at <= phase.end and s.process and s.process.cpu_seconds is not None
        ]
        if len(inside) >= 2:
            readings += len(inside)
            seconds += inside[-1][0] - inside[0][0]
            used += inside[-1][1] - inside[0][1]
    return readings, seconds, used


def _cpu_work(role: Placed, phase: Phase, samples: Sequence[Sample], timed: Sequence[Phase]) -> Work:
    """CPU time is a counter: its rate inside the phase, else inside all the test's timed phases of its kind."""
    same = [p for p in timed if p.kind == phase.kind]
    for spans, verdict in (([phase], Verdict.WORKED), (same, Verdict.WORKED_OVER_TEST)):
        readings, seconds, used = _cpu_rate(spans, samples)
        if seconds >= CPU_MIN_SECONDS:
            cores = used / seconds
            return Work(
                role.name, phase.kind, readings, round(cores, 2), verdict if cores >= CPU_WORKED else Verdict.IDLE
            )
    return Work(role.name, phase.kind, 0, None, Verdict.TOO_SHORT)


def partial(load: LoadLog | None) -> tuple[int, int] | None:
    """(offloaded, layers) when the load log says some but not all layers went to the GPUs."""
    if load is None or load.offloaded is None:
        return None
    return load.offloaded if 0 < load.offloaded[0] < load.offloaded[1] else None


def judge(
    phases: Sequence[Phase],
    samples: Sequence[Sample],
    roles: Sequence[Placed],
    interval: float,
    load: LoadLog | None = None,
    expected: Mapping[str, float] | None = None,
) -> Judgement:
    """One test of one run: every timed phase, every role, and the GPUs outside the placement; only readings inside
    the timed phases count (not the load or llama-bench's untimed warm-up). `expected`: each device's share of a phase's time from what it holds and its bandwidth (absent:
    unknown); with partial offload, an idle reading counts only where that share is one sampling can see."""
    readable = {r.pci_bus_id for s in samples for r in s.engines if r.busy_percent is not None}
    placed = {r.pci_bus_id for r in roles if r.pci_bus_id}
    layers = partial(load)
    work: list[Work] = []
    evidence: list[str] = []
    unresolved: list[str] = []
    for phase in phases:
        for role in roles:
            if role.on_cpu:
                found = _cpu_work(role, phase, samples, phases)
            elif role.pci_bus_id is None or role.pci_bus_id not in readable:
                found = Work(role.name, phase.kind, 0, None, Verdict.NOT_READABLE)
            else:
                found = _gpu_work(role, phase, samples, phases, interval)
            share = (expected or {}).get(role.name)
            if found.verdict is Verdict.IDLE and layers and not role.on_cpu and (share or 0) < RESOLVABLE_SHARE:
                found = found._replace(verdict=Verdict.UNRESOLVED)
                known = f"an expected {share * 100:.1f} % of the time" if share is not None else "an unknown share"
                unresolved.append(
                    f"{role.name} holds {layers[0]}/{layers[1]} layers: idle readings during {phase.kind} (at most "
                    f"{found.busy:g} %) cannot show {known}"
                )
            work.append(found)
            if found.verdict is Verdict.IDLE:
                measure = f"{found.busy} cores" if role.on_cpu else f"at most {found.busy:g} %"
                evidence.append(f"{role.name} idle during {phase.kind} ({measure} over {found.readings} readings)")
        window = _window(samples, phase.start, phase.end, interval)
        # a card of the placement that no reading matches may be any of them: then none is known to be outside it
        unmatched = any(not r.on_cpu and r.pci_bus_id not in readable for r in roles)
        for pci in sorted(readable - placed) if not unmatched else ():
            values = _busy(window, pci)
            if len(values) >= 2 and sum(values) / len(values) > BUSY_PERCENT:
                mean = sum(values) / len(values)
                work.append(Work(pci, phase.kind, len(values), max(values), Verdict.BUSY_OUTSIDE))
                evidence.append(f"GPU {pci}, outside the placement, busy {mean:.0f} % during {phase.kind}")
    devices = [r for r in roles if r.name != HOST]  # lavapipe too: a Vulkan device, though it runs on the CPU
    if load is not None and devices and load.offloaded is not None and load.offloaded[0] == 0 < load.offloaded[1]:
        evidence.append(f"load log: offloaded 0/{load.offloaded[1]} layers to GPU, so the weights ran on the CPU")
    if evidence:
        return Judgement(Validity.FALLBACK, tuple(evidence), tuple(work))
    if not phases:
        return Judgement(Validity.UNPROVEN, ("no timed phase was seen in the run's progress lines",), tuple(work))
    unsure = [w for w in work if w.verdict.unsure and w.verdict is not Verdict.UNRESOLVED]
    if unsure or unresolved:
        reasons = sorted({f"{w.device}: {w.verdict.value} ({w.phase})" for w in unsure}) + sorted(set(unresolved))
        return Judgement(Validity.UNPROVEN, tuple(reasons), tuple(work))
    return Judgement(Validity.VALID, (), tuple(work))


# From the worst: a set of rows or runs is as good as its worst member (one definition, for rows and for runs).
WORST_FIRST = (
    Validity.FAILED,
    Validity.NOT_RUN,
    Validity.FALLBACK,
    Validity.PARTIAL,
    Validity.UNPROVEN,
    Validity.VALID,
)


def worst(states: Iterable[Validity]) -> Validity | None:
    """The worst of the states (None: there are none)."""
    given = set(states)
    return next((state for state in WORST_FIRST if state in given), None)


def with_coverage(validity: Validity, partial: str | None) -> Validity:
    """A judgement with the coverage's finding: device-placed work on the CPU makes a valid or unproven test partial;
    a fallback stays one (sampling saw more than the graph shows)."""
    return Validity.PARTIAL if partial and validity in (Validity.VALID, Validity.UNPROVEN) else validity


def slowdowns(samples: Sequence[Sample], placed: set[str]) -> list[str]:
    """Clock slowdowns (power cap, thermal …) any placed GPU reported during the run."""
    seen = sorted(
        {(r.pci_bus_id, reason) for s in samples for r in s.engines if r.pci_bus_id in placed for reason in r.slowdowns}
    )
    return [f"GPU {pci}: clocks held down ({reason}) during the run" for pci, reason in seen]
