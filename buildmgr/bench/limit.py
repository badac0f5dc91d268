"""How far a decode is from the physical limit, and what it cost: each device's share of the weights (the load
log's model buffers), the bytes it reads per generated token (tensor by tensor from the GGUF, where the load log put
each: dense tensors whole, experts by the share a token uses, one row of a lookup table; plus its KV cache at the
depth), the memory-bandwidth bound those bytes give at each device's peak, and each device's energy per token in
each timed phase (a counter that only grows: NVML's, amdgpu's, RAPL's). Pure."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from buildmgr.bench.logs import LoadLog, Phase
from buildmgr.bench.sampling import BRACKET, Sample
from buildmgr.core import units

CPU = "CPU"  # every CPU-side buffer (CPU, CPU_Mapped, CPU_REPACK, CUDA_Host …) and the CPU's energy
NEGLIGIBLE = 0.001  # of a token's bytes: a device reading less bounds nothing
_BLOCK = re.compile(r"^blk\.(\d+)\.")
# llama.cpp's tensor names (src/llama-arch.cpp at the pin): expert tensors, merged (ffn_up_exps, ffn_gate_up_exps,
# the chunked _chexps) or one per expert (blk.N.ffn_up.E.weight); the tables a token looks up one row of
_EXPERTS = re.compile(r"_(ch)?exps\.|\.ffn_(gate|up|down)\.\d+\.weight$")
_LOOKUP = re.compile(r"(^|\.|_)(token_embd|position_embd|per_layer_token_embd)\.weight$")
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


@dataclass(frozen=True)
class Holding:
    """A device's share of the weights, from the load log's model buffers (`CPU`: every CPU-side buffer)."""

    device: str
    weights_mib: float
    share: float


@dataclass(frozen=True)
class Limit:
    """A decode row's memory-bandwidth bound: each device reads its bytes once per token at its peak bandwidth; the
    devices of a layer split take turns, so their times add (with -sm row/tensor the GPUs read at once)."""

    limit_ts: float | None
    percent: float | None  # of the limit the median reached
    read_mb: dict[str, float]  # device → MB read per token
    bandwidth_gbs: dict[str, float | None]
    unknown: str | None = None  # why there is no limit


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


def device_of(buffer: str, devices: Sequence[str]) -> str:
    """The device a buffer type belongs to: CUDA0 and CUDA0_Split are CUDA0's; the rest is the CPU's."""
    return next((d for d in devices if buffer == d or buffer.startswith(f"{d}_")), CPU)


def holdings(load: LoadLog, devices: Sequence[str]) -> tuple[Holding, ...]:
    """Each device's weights and share (the CPU last, where it holds any)."""
    mib: dict[str, float] = dict.fromkeys(devices, 0.0)
    for buffer, size in load.weights().items():
        owner = device_of(buffer, devices)
        mib[owner] = mib.get(owner, 0.0) + size
    total = sum(mib.values())
    if not total:
        return ()
    return tuple(Holding(d, round(m, 2), round(m / total, 4)) for d, m in mib.items() if d != CPU or m)


@dataclass(frozen=True)
class ModelBytes:
    """What decoding a token reads of a model, from its GGUF header (each tensor's type and shape give its bytes)."""

    tensors: tuple[tuple[str, int, int], ...]  # name, bytes, rows (ggml's last dimension: a lookup reads one)
    expert_share: float  # experts used per token over experts (1.0: no experts)

    @property
    def tied(self) -> bool:
        """No output.weight: the LM head multiplies by token_embd.weight, read whole."""
        return not any(name == "output.weight" for name, _, _ in self.tensors)


def _tensor_device(name: str, load: LoadLog, devices: Sequence[str]) -> str:
    """Where the run put a tensor: an -ot's buffer type, else its layer's device (the output layer's for output.*),
    else the CPU (the input layer: llama.cpp keeps it there)."""
    if name in load.overridden:
        return device_of(load.overridden[name], devices)
    if (block := _BLOCK.match(name)) and int(block.group(1)) in load.layers:
        return load.layers[int(block.group(1))]  # a device outside `devices` stays itself: its bandwidth is unknown
    if name.startswith("output") and load.layers:
        return load.layers[max(load.layers)]
    return CPU


def weights_read(model: ModelBytes, load: LoadLog, devices: Sequence[str]) -> dict[str, float]:
    """MiB of weights each device reads per decoded token, tensor by tensor: dense tensors whole, expert tensors by
    the share of experts a token uses, one row of the token embeddings (all of them again where the head is tied)."""
    read: dict[str, float] = {}
    for name, size, rows in model.tensors:
        device = _tensor_device(name, load, devices)
        if _LOOKUP.search(name):
            share = 1 / max(rows, 1)
            if model.tied and name == "token_embd.weight":
                out = _tensor_device("output.weight", load, devices)
                read[out] = read.get(out, 0.0) + size / 2**20
        elif _EXPERTS.search(name):
            share = model.expert_share
        else:
            share = 1.0
        read[device] = read.get(device, 0.0) + size * share / 2**20
    return read


def read_per_token(
    held: Sequence[Holding], load: LoadLog, test: int, n_depth: int, n_gen: int, model: ModelBytes | None
) -> dict[str, float]:
    """MB each device reads per generated token: its weights, tensor by tensor where the load log says where each
    layer went (else what its model buffers hold, the CPU's less the token embeddings, of which a token reads one
    row), and its KV cache's share of the cells a token attends to on average (the depth and half the tokens
    generated), from the test's own context."""
    devices = [h.device for h in held if h.device != CPU]
    if model is not None and load.layers:
        read = weights_read(model, load, devices)
    else:
        looked_up = sum(size / 2**20 for name, size, _ in model.tensors if _LOOKUP.search(name)) if model else 0.0
        looked_up = 0.0 if model is not None and model.tied else looked_up  # a tied head reads the table whole
        read = {h.device: h.weights_mib - (looked_up if h.device == CPU else 0.0) for h in held}
    cells = load.cells.get(test)
    for buffer, size in load.kv.get(test, {}).items() if cells else ():
        owner = device_of(buffer, devices)
        assert cells is not None
        read[owner] = read.get(owner, 0.0) + size * min((n_depth + n_gen / 2) / cells, 1.0)
    return {d: round(max(v, 0.0) * units.MB_PER_MIB, 2) for d, v in read.items()}


def decode_limit(
    read_mb: Mapping[str, float],
    bandwidth: Mapping[str, tuple[float | None, str]],
    median: float | None,
    parallel: bool = False,
) -> Limit:
    """tokens/s if every device read its bytes at its peak bandwidth, one after another (a layer split takes turns),
    or at once (`parallel`: -sm row and tensor, where the slowest device bounds); and the median's share."""
    gbs = {d: bandwidth.get(d, (None, "no bandwidth known"))[0] for d in read_mb}
    total = sum(read_mb.values())
    # a device reading a token-embedding row (under 0.1 % of the bytes) bounds nothing, known bandwidth or not
    counted = {d: mb for d, mb in read_mb.items() if mb > total * NEGLIGIBLE}
    lacking = [d for d, mb in counted.items() if gbs[d] is None]
    if lacking:
        why = "; ".join(f"{d}: {bandwidth.get(d, (None, 'no bandwidth known'))[1]}" for d in lacking)
        return Limit(None, None, dict(read_mb), gbs, f"no peak bandwidth for {why}")
    times = {d: mb / 1000 / g for d, mb in counted.items() if (g := gbs[d])}
    # -sm row/tensor: the GPUs read at once, the CPU's share before or after them
    gpus = [t for d, t in times.items() if d != CPU]
    seconds = times.get(CPU, 0.0) + max(gpus, default=0.0) if parallel else sum(times.values())
    if not seconds:
        return Limit(None, None, dict(read_mb), gbs, "no bytes read per token were found in the load log")
    limit = 1 / seconds
    percent = round(median / limit * 100, 1) if median else None
    return Limit(round(limit, 2), percent, dict(read_mb), gbs)


def time_shares(read_mb: Mapping[str, float], bandwidth: Mapping[str, tuple[float | None, str]]) -> dict[str, float]:
    """Each device's expected share of a token's time at the bandwidth bound (empty where a bandwidth is unknown)."""
    times = {}
    total = sum(read_mb.values())
    for device, mb in read_mb.items():
        if mb <= total * NEGLIGIBLE:
            continue
        gbs = bandwidth.get(device, (None, ""))[0]
        if gbs is None:
            return {}
        times[device] = mb / gbs
    total = sum(times.values())
    return {d: t / total for d, t in times.items()} if total else {}


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


def energy(
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
