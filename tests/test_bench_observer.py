"""bench's own share of the CPU while llama.cpp computes on it (issue #48): recorded per process, said where the
CPU computes with a thread on every CPU, and kept small by reading NVML's fixed values once."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

from buildmgr.backends.cuda.engines import NvmlEngines
from buildmgr.bench import energy
from buildmgr.bench.aggregate import observer_note, observer_share


def _run(observer: float | None, seconds: float, cpus: int | None) -> Any:
    return SimpleNamespace(observer_cpu_s=observer, ran=SimpleNamespace(seconds=seconds), cpus=cpus)


def test_said_where_the_cpu_computes_on_every_cpu() -> None:
    runs = [_run(0.2, 10.0, 16), _run(0.6, 10.0, 16)]
    row = {"n_threads": 16}
    note = observer_note(observer_share(runs, row, True), runs, row, 0.1)
    assert note is not None and "4.0% of a CPU" in note and "16 threads on 16 CPUs" in note


def test_not_said_where_cpus_are_left_or_the_cpu_does_not_compute() -> None:
    runs = [_run(0.2, 10.0, 16)]
    assert (
        observer_note(observer_share(runs, {"n_threads": 8}, True), runs, {"n_threads": 8}, 0.1) is None
    )  # llama.cpp leaves CPUs free
    assert (
        observer_note(observer_share(runs, {"n_threads": 16}, False), runs, {"n_threads": 16}, 0.1) is None
    )  # every layer on a GPU
    old = [_run(None, 10.0, 16)]
    assert (
        observer_note(observer_share(old, {"n_threads": 16}, True), old, {"n_threads": 16}, 0.1) is None
    )  # rows of an older buildmgr


class _Nvml:
    """nvidia-ml-py's calls that NvmlEngines makes, counted."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM = 1

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        values = {
            "nvmlDeviceGetCount": 1,
            "nvmlDeviceGetHandleByIndex": "h0",
            "nvmlDeviceGetPciInfo": SimpleNamespace(busId=b"00000000:00:06.0"),
            "nvmlDeviceGetUtilizationRates": SimpleNamespace(gpu=97),
            "nvmlDeviceGetMemoryInfo": SimpleNamespace(used=1 << 30),
            "nvmlDeviceGetClockInfo": 1980,
            "nvmlDeviceGetPowerUsage": 350_000,
            "nvmlDeviceGetCurrentClocksEventReasons": 0,
            "nvmlDeviceGetPowerManagementLimit": 500_000,
            "nvmlDeviceGetPowerManagementDefaultLimit": 700_000,
            "nvmlDeviceGetTotalEnergyConsumption": 12_345,
        }
        if name not in values:
            raise AttributeError(name)

        def call(*args: object) -> object:
            self.calls[name] = self.calls.get(name, 0) + 1
            return values[name]

        return call


def test_a_sample_reads_only_what_changes() -> None:
    nvml = _Nvml()
    engines = NvmlEngines(nvml)
    readings = [engines.read() for _ in range(10)]
    assert readings[-1][0].pci_bus_id == "0000:00:06.0" and readings[-1][0].busy_percent == 97
    assert nvml.calls["nvmlDeviceGetPciInfo"] == 1  # once, when opened
    assert "nvmlDeviceGetPowerManagementLimit" not in nvml.calls
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 10
    assert engines.limits() == ["GPU 00000000:00:06.0: power limit 500 W is below its default 700 W"]


def test_each_sample_keeps_how_long_its_reads_took():
    import time

    from buildmgr.bench.sampling import Sampler

    class Slow:  # a vendor library whose every reading takes 20 ms
        def read(self) -> list[Any]:
            time.sleep(0.02)
            return []

    sample = Sampler([Slow()], 0.1).read()  # type: ignore[list-item]
    assert sample.read_s is not None and sample.read_s >= 0.02
    assert Sampler([], 0.1).read().read_s < 0.02  # type: ignore[operator]


def test_the_counters_alone_are_one_nvml_call_a_card_read_between_the_samples() -> None:
    """The energy counter read alone between the 0.1 s samples (every 10 ms while it has not moved, as this fake's
    never does): one NVML call a card each time, under the same PCI id as the card's samples."""
    import time

    from buildmgr.bench.sampling import COUNTER_INTERVAL, Sampler

    nvml = _Nvml()
    engines = NvmlEngines(nvml)
    card = "0000:00:06.0"
    assert engines.counters({card}) == [(card, 12345.0)] and engines.counters({"0000:00:07.0"}) == []
    before = dict(nvml.calls)
    with Sampler([engines], 0.1, counted=frozenset({card})) as sampler:
        time.sleep(0.35)
    samples = sampler.samples or []
    counted = nvml.calls["nvmlDeviceGetTotalEnergyConsumption"] - before["nvmlDeviceGetTotalEnergyConsumption"]
    full = nvml.calls["nvmlDeviceGetUtilizationRates"] - before.get("nvmlDeviceGetUtilizationRates", 0)
    assert full == len(samples) >= 4  # the samples every 0.1 s, as before
    # each sample's own reading, and alone between: most of the time between the samples (a loaded host wakes late)
    assert counted - full >= 0.1 / COUNTER_INTERVAL and sum(len(s.counters) for s in samples) == counted - full
    for before_, sample in itertools.pairwise(samples):
        assert all(
            before_.at + (before_.read_s or 0) < c.at <= sample.at + (sample.read_s or 0) for c in sample.counters
        )
        assert {c.pci_bus_id for c in sample.counters} == {card}


def test_each_counter_read_alone_keeps_how_long_its_call_took_and_the_samples_file_says_it():
    """The H100's tune by energy (2026-12-06, evening) cost 22 % of a core where a model of its reads said 10 %: what
    each read cost there was not kept."""
    import time
    from types import SimpleNamespace

    from buildmgr.bench.runner import _samples_json
    from buildmgr.bench.sampling import Sampler

    card = "0000:00:06.0"

    class Slow:  # a card whose counter read takes 15 ms
        def read(self) -> list[Any]:
            return []

        def counters(self, cards: Any) -> list[tuple[str, float]]:
            time.sleep(0.015)
            return [(card, 1.0)]

    with Sampler([Slow()], 0.1, counted=frozenset({card})) as sampler:  # type: ignore[list-item]
        time.sleep(0.25)
    samples = sampler.samples or []
    read = [c for s in samples for c in s.counters]
    assert read and all(c.read_s is not None and c.read_s >= 0.015 for c in read)
    run = SimpleNamespace(round=1, started=samples[0].at, spans={}, phases=[], samples=samples)
    record = _samples_json(SimpleNamespace(config=SimpleNamespace(label="x")), run)  # type: ignore[arg-type]
    assert all(len(c) == 4 and c[3] >= 15 for s in record["samples"] for c in s["counters"])


class _Answers:
    """A source whose counter reads answer as `answer(n)` says for the n-th (None: nothing, as for a card without a
    counter or a read that failed), counted."""

    def __init__(self, card: str, answer: Any) -> None:
        self.card, self.answer, self.asked = card, answer, 0

    def read(self) -> list[Any]:
        return []

    def counters(self, cards: Any) -> list[tuple[str, float]]:
        self.asked += 1
        value = self.answer(self.asked)
        return [] if value is None else [(self.card, value), ("0000:00:99.0", 1.0)]  # and one it was not asked of


def test_a_card_whose_counter_never_answers_is_asked_once_and_one_that_failed_once_is_read_on() -> None:
    import time

    from buildmgr.bench.sampling import COUNTER_INTERVAL, Sampler

    card = "0000:00:06.0"
    never = _Answers(card, lambda n: None)
    with Sampler([never], 0.1, counted=frozenset({card})):  # type: ignore[list-item]
        time.sleep(0.25)
    assert never.asked == 1
    once = _Answers(card, lambda n: None if n == 3 else float(n))  # the third read fails
    with Sampler([once], 0.1, counted=frozenset({card})) as sampler:  # type: ignore[list-item]
        time.sleep(0.25)
    read = [c for s in sampler.samples or [] for c in s.counters]
    assert once.asked > 10 and len(read) == once.asked - 1 and {c.pci_bus_id for c in read} == {card}
    failing = _Answers(card, lambda n: None if n >= 3 else float(n))  # fails from the third read on
    with Sampler([failing], 0.1, counted=frozenset({card})):  # type: ignore[list-item]
        time.sleep(0.25)
    assert failing.asked < 0.25 / COUNTER_INTERVAL * 2  # every 10 ms, not in a loop


def test_the_counters_are_read_alone_only_where_energy_decides() -> None:
    """Each NVML energy read costs the CPU (an H100: a third of a core at 100 reads a second, docs/real-runs.md
    2026-12-06, which slowed the placements whose threads fill every CPU): a race by speed does not pay it."""
    from buildmgr.bench.config import DEFAULT_WORKLOAD, BenchRequest
    from buildmgr.bench.judge import Placed
    from buildmgr.bench.process import timed_cards

    planned: Any = SimpleNamespace(
        roles=(Placed("CUDA0", "0000:00:06.0"), Placed("CPU", None, on_cpu=True), Placed("Vulkan0", "0000:00:07.0"))
    )
    assert timed_cards(planned, BenchRequest(None, (), DEFAULT_WORKLOAD)) == frozenset()
    timed = BenchRequest(None, (), DEFAULT_WORKLOAD, timed_energy=True)
    assert timed_cards(planned, timed) == {"0000:00:06.0", "0000:00:07.0"}


def test_tune_reads_the_counters_alone_when_it_races_by_energy_and_not_by_speed() -> None:
    from pathlib import Path

    from buildmgr.tune.config import TuneRequest
    from buildmgr.tune.inputs import bench_request_of
    from buildmgr.tune.space import Objective

    by = {o: bench_request_of(TuneRequest("cuda", Path("m.gguf"), o, n_gen=320)) for o in Objective}
    assert [o for o, r in by.items() if r.timed_energy] == [Objective.J_PER_TOKEN]
    assert by[Objective.TG].workload.tests()[1][1] == 320 and by[Objective.TG].model == Path("m.gguf")


def _polled(
    step: float, phase: float, seconds: float, late: float = 0.0, jitter: float = 0.0
) -> list[tuple[float, float]]:
    """A card's counter (mJ at 450 W, moving every `step` from `phase`, each update up to `jitter` late) read when
    the schedule asks, each read up to `late` after it (a loaded host wakes late): the readings, as (at, mJ)."""
    import random

    from buildmgr.bench.sampling import CounterClock

    rng = random.Random(step + phase)
    updates, t = [], phase
    while t < seconds + 1:
        updates.append(t + rng.uniform(0, jitter))
        t += step
    clock, readings, at = CounterClock(), [], 0.0
    while at < seconds:
        at = max(clock.next_at(), at) + rng.uniform(0, late)
        mj = 450.0 * sum(1 for u in updates if u <= at) * step * 1000
        clock.seen(at, mj)
        readings.append((at, mj))
    return readings


def test_a_stepping_counter_is_read_around_its_updates_only_and_still_timed_by_them() -> None:
    """The H100's counter moves every 0.1 s; read every 10 ms it cost a third of a core (docs/real-runs.md,
    2026-12-06). Once two updates are timed, the schedule reads it 20 ms before the next is due and every 10 ms until
    it moves: a few reads a step, the energy over a stretch as exact as before."""

    for k in range(20):  # reads up to 8 ms late: the slack a loaded host needs
        readings = _polled(0.1, k * 0.0047, 5.0, late=0.008, jitter=0.003)
        assert len([r for r in readings if r[0] > 0.5]) < 40 * 4.5  # ten a step before
        for start in (0.6, 1.37, 2.9):
            inside = [r for r in readings if start <= r[0] <= start + 0.62]
            span = energy._span(inside, True)
            assert span is not None and abs(span[0] / 1000 / span[1] / 450 - 1) < 0.05


def test_a_counter_that_moves_faster_than_the_reads_or_irregularly_is_read_every_10_ms() -> None:
    from buildmgr.bench.sampling import COUNTER_INTERVAL

    fast = _polled(0.004, 0.0, 2.0)
    assert len(fast) >= 0.9 * 2.0 / COUNTER_INTERVAL
    for k in range(10):  # updates 0.05 to 0.15 s apart
        readings = _polled(0.1, k * 0.003, 5.0, jitter=0.05)
        inside = [r for r in readings if 1.0 <= r[0] <= 3.0]
        span = energy._span(inside, True)
        assert span is not None and abs(span[0] / 1000 / span[1] / 450 - 1) < 0.1


def test_a_change_read_long_after_the_reading_before_it_does_not_time_an_update() -> None:
    """Only a change between two reads close together says when the counter moved."""

    readings = [(0.0, 0.0), (0.01, 45.0), (0.3, 45.0), (0.5, 180.0), (0.51, 225.0), (0.9, 225.0), (1.2, 405.0)]
    assert energy._span(readings, True) == (225.0 - 45.0, 0.51 - 0.01)


def test_the_sampler_reads_a_stepping_counter_as_its_clock_asks() -> None:
    import time
    from collections.abc import Collection

    from buildmgr.bench.sampling import COUNTER_INTERVAL, Sampler

    card = "0000:00:06.0"

    class Stepping:  # a card whose counter moves every 0.1 s at 450 W
        reads = 0

        def read(self) -> list[Any]:
            return []

        def counters(self, cards: Collection[str]) -> list[tuple[str, float]]:
            self.reads += 1
            return [(card, 45_000.0 * (time.monotonic() // 0.1))]

    source = Stepping()
    with Sampler([source], 0.1, counted=frozenset({card})) as sampler:  # type: ignore[list-item]
        time.sleep(1.5)
    assert source.reads < 0.7 * 1.5 / COUNTER_INTERVAL  # every 10 ms: 150
    readings = sorted((c.at, c.energy_mj) for s in sampler.samples or [] for c in s.counters)
    span = energy._span(readings, True)
    assert span is not None and span[1] > 0.5 and abs(span[0] / 1000 / span[1] / 450 - 1) < 0.05


def test_a_card_read_alone_whose_updates_were_never_timed_falls_back_to_the_samples_and_says_so() -> None:
    """Reads alone that all came too late to time an update (a loaded host): the samples' own readings of the counter
    still give the energy, within a step, under the basis that says so, not an unknown that asks for a longer -n."""
    from buildmgr.backends import EngineReading
    from buildmgr.bench import logs
    from buildmgr.bench.sampling import CounterReading, Sample

    card = "0000:00:06.0"

    def counter(at: float) -> float:  # 450 W in 0.1 s steps
        return 45_000.0 * (at // 0.1)

    samples = [
        Sample(
            t / 10,
            (EngineReading(card, 90.0, 1000, 1980, None, (), counter(t / 10)),),
            None,
            counters=(CounterReading(t / 10 - 0.05, card, counter(t / 10 - 0.05)),),  # 0.1 s apart: none timed
        )
        for t in range(1, 40)
    ]
    phases = [logs.Phase(1, "generation", 0.5, 3.5)]
    [found] = energy.per_card(phases, samples, {"CUDA0": card}, {"generation": 100})
    assert found.basis == "energy counter" and found.joules is not None and abs(found.joules / 3.0 / 450 - 1) < 0.1
    around = [CounterReading(at, card, counter(at)) for s in samples for at in (s.at - 0.004, s.at + 0.004)]
    timed = [s._replace(counters=(*s.counters, *(c for c in around if s.at - 0.1 < c.at <= s.at))) for s in samples]
    [again] = energy.per_card(phases, timed, {"CUDA0": card}, {"generation": 100})
    assert again.basis == energy.TIMED and again.joules is not None


def test_the_share_is_kept_in_the_row_where_it_slows_llama_cpp_s_threads() -> None:
    from buildmgr.bench.aggregate import observer_share

    runs = [_run(0.2, 10.0, 16), _run(0.6, 10.0, 16)]
    assert observer_share(runs, {"n_threads": 16}, True) == 0.04
    assert observer_share(runs, {"n_threads": 8}, True) is None  # llama.cpp leaves CPUs free
    assert observer_share(runs, {"n_threads": 16}, False) is None  # every layer on a GPU


def test_tune_says_where_bench_s_own_sampling_took_a_tenth_of_a_cpu_or_more_beside_llama_cpp() -> None:
    """The H100's MoE grid (2026-12-06): bench's sampler took 31-34 % of a CPU beside 16 threads on 16 CPUs and every
    `-t 8` read as fast as `-t 16`; the plan said nothing of it."""
    from buildmgr.tune.result import sampler_load

    note = sampler_load([("fit", 0.311), ("CUDA0 ncmoe5", 0.34), ("fit t8", None)])
    assert note is not None and "34.0%" in note and "CUDA0 ncmoe5" in note
    assert sampler_load([("fit", 0.049), ("fit t8", None)]) is None
