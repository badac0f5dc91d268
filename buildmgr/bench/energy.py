"""What a benchmark's work cost in energy: the CPU packages' RAPL counters, found and read, and each card's and the
CPU's joules in each kind of timed phase from the counters (or power readings) the sampler took (a counter that only
grows: NVML's, amdgpu's, RAPL's), per token. Pure but for reading the RAPL files."""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from buildmgr.bench.limit import CPU
from buildmgr.bench.logs import Phase
from buildmgr.bench.sampling import BRACKET, Sample

RAPL = Path("/sys/class/powercap")
# An energy counter moves in steps of its update period (an H100's every 0.1 s, docs/real-runs.md), so a difference
# over one span is off by up to a step: the readings must span this much for a rate within about 20 %. Over several
# spans the errors add as independent ones do: √spans times this.
MIN_ENERGY_SECONDS = 0.5
# Read alone between the samples, a counter's own updates are timed to within half a BRACKET at each end of a span,
# whatever its step: a span from its first update timed to its last this long gives a rate within 5 %.
MIN_TIMED_SECONDS = 2 * (BRACKET / 2) / 0.05
TIMED = "energy counter, timed by its updates"  # the basis of a card's energy read alone around its updates
# A power reading may be an average over the time before it (vendor libraries document up to the last second; a
# card whose library also has a counter is read by the counter instead): only a reading this long into a stretch of
# phases measures the phases alone.
POWER_AVERAGE_S = 1.0


def rapl_files(root: Path = RAPL) -> list[Path]:
    """Each CPU package's energy counter (µJ): intel-rapl:N/energy_uj, readable (often root only since 2020)."""
    found = sorted(root.glob("intel-rapl:[0-9]*/energy_uj")) if root.is_dir() else []
    return [f for f in found if ":" not in f.parent.name.split(":", 1)[1] and os.access(f, os.R_OK)]


def rapl_unreadable(root: Path = RAPL) -> str:
    """Why there is no CPU energy: no powercap zone, or counters only root may read."""
    if not root.is_dir() or not list(root.glob("intel-rapl:[0-9]*")):
        return "no RAPL energy counters here (/sys/class/powercap)"
    return "RAPL's energy counters are not readable by this user (root only since Linux 5.10)"


def read_rapl(files: Sequence[Path]) -> float | None:
    """The packages' counters summed, in mJ (None where one cannot be read)."""
    total = 0.0
    for file in files:
        try:
            total += int(file.read_text()) / 1000
        except (OSError, ValueError):
            return None
    return total


def cpu_reader(root: Path = RAPL) -> Callable[[], float | None] | None:
    """What the sampler calls for the CPU's energy in mJ, where RAPL's counters are readable here."""
    files = rapl_files(root)
    return (lambda: read_rapl(files)) if files else None


@dataclass(frozen=True)
class Energy:
    """One card's energy (its devices' names, "+"-joined) or the CPU's, in one kind of timed phase over the kept runs
    (None: unreadable, and why)."""

    device: str
    phase: str  # prompt | generation
    basis: str  # where the joules come from
    joules: float | None
    seconds: float  # of the phases' time the readings covered
    j_per_token: float | None
    unknown: str | None = None
    too_short: bool = False  # read, but over too little time: the workload's doing, not the device's


def _kinds(phases: Sequence[Phase]) -> list[str]:
    return list(dict.fromkeys(p.kind for p in phases))


def _counter(sample: Sample, pci: str | None) -> tuple[float | None, float | None]:
    """(energy counter in mJ, power in W) of one device in one sample; `pci` None: the CPU's packages."""
    if pci is None:
        return sample.cpu_energy_mj, None
    reading = next((r for r in sample.engines if r.pci_bus_id == pci), None)
    return (reading.energy_mj, reading.power_w) if reading else (None, None)


def timed_updates(readings: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """A counter's updates timed by reads alone: each change between two (time, mJ) reads at most BRACKET apart, at
    their midpoint, with the value after it."""
    return [
        ((before[0] + now[0]) / 2, now[1])
        for before, now in itertools.pairwise(readings)
        if now[1] != before[1] and now[0] - before[0] <= BRACKET
    ]


def _span(readings: Sequence[tuple[float, float]], timed: bool) -> tuple[float, float] | None:
    """(mJ, seconds) a counter's readings inside one stretch span: read alone (`timed`), from its first update timed
    to its last (timed_updates), so the time is the energy's own; else from the first reading to the last, off by up
    to a step. None where it moved too little, or wrapped."""
    if timed:
        readings = timed_updates(readings)
    if len(readings) < 2 or readings[-1][1] < readings[0][1]:
        return None
    return readings[-1][1] - readings[0][1], readings[-1][0] - readings[0][0]


def _spans(
    readings: Sequence[tuple[float, float]], stretches: Sequence[tuple[float, float]], alone: bool
) -> tuple[float, float, int]:
    """(mJ, seconds, spans) a counter's readings span over the stretches, each stretch on its own."""
    used, covered, spans = 0.0, 0.0, 0
    for start, end in stretches:
        if (span := _span([(at, e) for at, e in readings if start <= at <= end], alone)) is not None:
            used, covered, spans = used + span[0], covered + span[1], spans + 1
    return used, covered, spans


def _stretches(phases: Sequence[Phase]) -> list[tuple[float, float]]:
    """The phases as stretches of time: repetitions that follow one another (one's end is the next one's start, the
    same progress line) are one stretch, so a counter's readings inside span them whole rather than piece by piece."""
    found: list[tuple[float, float]] = []
    for phase in sorted(phases, key=lambda p: (p.start, p.end)):
        if found and phase.start == found[-1][1]:
            found[-1] = (found[-1][0], phase.end)
        else:
            found.append((phase.start, phase.end))
    return found


def per_card(
    phases: Sequence[Phase], samples: Sequence[Sample], devices: Mapping[str, str | None], tokens: Mapping[str, int]
) -> tuple[Energy, ...]:
    """Per card and kind of phase: the mean power over the readings inside the phases (the counter's difference
    across each stretch of them, timed by its updates where it was read alone around them and enough of them were
    timed, else at the samples; or, for a card no sample read a counter of, the power readings' mean) times the
    phases' time, per token. The devices of one card (a backend's virtual devices, or the card under two backends'
    names) read one counter: one entry names them all, "+"-joined, so the card's joules are counted once."""
    cards: dict[str, list[str]] = {}  # by PCI id; a device without one by its name
    for name, pci in devices.items():
        cards.setdefault(pci if pci is not None else name, []).append(name)
    found = []
    for names in cards.values():
        device, pci = "+".join(names), devices[names[0]]
        if pci is None and device != CPU:  # the CPU's counter is the CPU's: read for this device it counts twice
            why = "no PCI id: no vendor library reads this device's energy"
            found += [Energy(device, kind, "energy counter", None, 0.0, None, why) for kind in _kinds(phases)]
            continue
        read = [_counter(s, pci) for s in samples]
        timed = sorted((c.at, c.energy_mj) for s in samples for c in s.counters if c.pci_bus_id == pci)
        has_counter = bool(timed) or any(e is not None for e, _ in read)
        has_power = any(w is not None for _, w in read)
        counter_basis = "RAPL package counters" if pci is None else "energy counter"
        sampled = [(s.at, e) for s, (e, _) in zip(samples, read, strict=True) if e is not None]
        for kind in _kinds(phases):
            mine = [p for p in phases if p.kind == kind]
            total = sum(p.end - p.start for p in mine)
            stretches = _stretches(mine)
            watts = [
                w
                for start, end in stretches
                for s, (_, w) in zip(samples, read, strict=True)
                if start + POWER_AVERAGE_S <= s.at <= end and w is not None
            ]
            # read alone around its updates where it was, else (or where no update was timed) at the samples
            tries = [(timed, True, MIN_TIMED_SECONDS, TIMED)] if timed else []
            tries.append((sampled, False, MIN_ENERGY_SECONDS, counter_basis))
            measured = [(_spans(readings, stretches, alone), floor, basis) for readings, alone, floor, basis in tries]
            passed = [(m, b) for m, floor, b in measured if m[2] and m[1] >= floor * math.sqrt(m[2])]
            count = tokens.get(kind, 0) * len(mine)
            if has_counter and passed:
                (used, covered, _), basis = passed[0]
                joules, seconds = used / 1000 / covered * total, covered
            elif not has_counter and len(watts) >= 2:  # no counter here: the power readings a stretch alone made
                settled = sum(max(end - start - POWER_AVERAGE_S, 0.0) for start, end in stretches)
                joules, seconds, basis = sum(watts) / len(watts) * total, settled, "power readings × time"
            else:
                # why: from the readings that came nearest their floor
                (_, covered, spans), floor, basis = max(
                    measured, key=lambda m: m[0][1] / (m[1] * math.sqrt(m[0][2] or 1))
                )
                basis = "power readings × time" if has_power and not has_counter else basis
                why = _unread(kind, has_counter, has_power, covered, total, spans, stretches, floor)
                found.append(Energy(device, kind, basis, None, round(covered, 3), None, why, has_counter or has_power))
                continue
            per_token = joules / count if count else None
            found.append(
                Energy(
                    device, kind, basis, round(joules, 3), round(seconds, 3), round(per_token, 5) if per_token else None
                )
            )
    return tuple(found)


def _unread(
    kind: str,
    has_counter: bool,
    has_power: bool,
    covered: float,
    total: float,
    spans: int,
    stretches: list[tuple[float, float]],
    floor: float,
) -> str:
    """Why a card's energy in these phases is not known."""
    if has_counter:
        return (
            f"the counter's readings inside the {kind} phases span {covered:.2f} s of {total:.2f} s in {spans} "
            f"stretches: under {floor * math.sqrt(max(spans, 1)):.2f} s its update period swamps the difference"
        )
    if has_power:
        longest = max((end - start for start, end in stretches), default=0.0)
        return (
            f"no energy counter, and a power reading averages up to the {POWER_AVERAGE_S:.0f} s before it: the {kind} "
            f"phases ran {longest:.2f} s at most in one stretch, too short for one to read them alone"
        )
    return "no sample read this device's energy or power"


def per_token(
    energy: Sequence[Energy], phases: Sequence[Phase], per_kind: Mapping[str, int], cpu_works: bool
) -> float | None:
    """A test's joules per token: every known entry's joules (each card once) over the tokens of its phases; None
    unless every device that did the work was read (the CPU only where it ran layers: counting a GPU alone for a
    CONFIG whose CPU ran half the layers would rank it cheaper)."""
    known = [e for e in energy if e.joules is not None]
    counted = sum(per_kind[k] * sum(1 for p in phases if p.kind == k) for k in {e.phase for e in energy})
    whole = bool(known) and all(e.joules is not None for e in energy if cpu_works or e.device != CPU)
    return round(sum(e.joules or 0 for e in known) / counted, 5) if whole and counted else None


class Role(Protocol):
    """A device a placement gives work, as far as its energy goes (bench's `Placed`)."""

    @property
    def name(self) -> str: ...
    @property
    def pci_bus_id(self) -> str | None: ...
    @property
    def on_cpu(self) -> bool: ...


def of_test(
    roles: Sequence[Role],
    phases: Sequence[Phase],
    samples: Sequence[Sample],
    test: tuple[int, int, int],
    cpu_works: bool,
) -> tuple[tuple[Energy, ...], float | None]:
    """Each card's (the roles placed off the CPU, by PCI id) and the CPU's energy over these phases, and the test's
    joules per token: None unless every device that worked was read (the CPU's counter counts where the CPU
    computes; elsewhere it may be unreadable, RAPL needing root). A CPU entry nothing could read says why."""
    devices: dict[str, str | None] = {r.name: r.pci_bus_id for r in roles if not r.on_cpu}
    devices[CPU] = None  # the CPU's packages, by RAPL
    per_kind = {"prompt": test[0] or 0, "generation": test[1] or 0}
    found = per_card(phases, samples, devices, per_kind) if phases else ()
    if any(e.device == CPU and e.joules is None for e in found) and not rapl_files():
        found = tuple(dataclasses.replace(e, unknown=rapl_unreadable()) if e.device == CPU else e for e in found)
    return found, per_token(found, phases, per_kind, cpu_works)
