"""tune's energy objective: a process's tokens per joule from the CPU's counter over its steady repetitions (the
first kept apart, as its speed), and none where a device that worked was not read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from buildmgr.bench.judge import HOST, Placed
from buildmgr.bench.logs import LoadLog, Phase
from buildmgr.bench.sampling import Sample
from buildmgr.tune import measure, race
from buildmgr.tune.space import Objective

TEST = (0, 64, 0)  # tg64 at depth 0: llama-bench's second test


def _run(cpu_watts: float | None, seconds: float = 1.0) -> Any:
    # three repetitions of `seconds` each; the counter grows by cpu_watts J per second (RAPL: mJ here)
    phases = [Phase(2, "generation", t * seconds, (t + 1) * seconds) for t in range(3)]
    samples = [
        Sample(t / 10, (), None, t / 10 * cpu_watts * 1000 if cpu_watts is not None else None) for t in range(31)
    ]
    rows = [{"n_prompt": 512, "n_gen": 0, "n_depth": 0}, {"n_prompt": 0, "n_gen": 64, "n_depth": 0}]
    return SimpleNamespace(rows=rows, phases=phases, samples=samples, load=LoadLog())


PLANNED: Any = SimpleNamespace(roles=[Placed(HOST, None, True)], config=SimpleNamespace(cpu_overrides=False))


def test_tokens_per_joule_over_the_steady_repetitions():
    # 2 steady seconds at 10 W for 128 tokens: 20 J, 0.15625 J/token, 6.4 tokens/J
    found = measure.units(_run(10.0), PLANNED, TEST, Objective.J_PER_TOKEN)
    assert found.value == pytest.approx(6.4, rel=1e-3) and not found.too_short
    assert found.basis == "RAPL package counters"  # said beside each process's figure in tune's progress
    # twice the power, half the tokens per joule: the race's "higher is better" holds for energy
    assert measure.units(_run(20.0), PLANNED, TEST, Objective.J_PER_TOKEN).value == pytest.approx(3.2, rel=1e-3)


def test_an_unread_counter_is_the_candidate_s_and_a_test_too_short_to_read_is_the_workload_s():
    unread = measure.units(_run(None), PLANNED, TEST, Objective.J_PER_TOKEN)
    assert unread.value is None and not unread.too_short and unread.why.startswith("its energy was not read")
    # a counter that was read, over repetitions of 0.2 s: the steady 0.4 s are under the 0.5 s a reading must span
    short = measure.units(_run(10.0, seconds=0.2), PLANNED, TEST, Objective.J_PER_TOKEN)
    assert short.value is None and short.too_short


def test_the_race_speaks_in_the_objective_s_unit():
    standings = [race.Standing(f"c{i}", (v,)) for i, v in enumerate((9.0, 8.0, 7.0, 2.0, 1.0))]
    out = race.after_round(standings, 1, Objective.J_PER_TOKEN.unit)
    assert out and all("tokens/J" in o.reason and "t/s" not in o.reason for o in out)


def test_a_card_without_a_counter_is_read_by_power_a_full_averaging_window_into_its_decode():
    """A card whose library has no energy counter: its power readings count only a second into the repetitions
    (a reading averages the time before it), and the figure says it stands on them."""
    from buildmgr.backends import EngineReading

    pci = "0000:00:06.0"
    planned: Any = SimpleNamespace(roles=[Placed("CUDA0", pci)], config=SimpleNamespace(cpu_overrides=False))
    phases = [Phase(2, "generation", t * 1.0, (t + 1) * 1.0) for t in range(4)]  # 3 steady seconds from 1.0 s
    # 100 W until 2.0 s (the trailing average of what came before), 250 W after
    samples = [
        Sample(t / 10, (EngineReading(pci, 90.0, 1000, 1980, 100.0 if t < 20 else 250.0, (), None),), None)
        for t in range(41)
    ]
    rows = [{"n_prompt": 512, "n_gen": 0, "n_depth": 0}, {"n_prompt": 0, "n_gen": 64, "n_depth": 0}]
    run: Any = SimpleNamespace(rows=rows, phases=phases, samples=samples, load=LoadLog())
    found = measure.units(run, planned, TEST, Objective.J_PER_TOKEN)
    # 3 s at 250 W for 192 tokens: 750 J, 0.256 tokens/J (with the first second's 100 W: 0.32)
    assert found.value == pytest.approx(192 / 750, rel=1e-3) and found.basis == "power readings × time"
    run.phases = [Phase(2, "generation", t * 0.25, (t + 1) * 0.25) for t in range(4)]  # 0.75 s: no reading settles
    short = measure.units(run, planned, TEST, Objective.J_PER_TOKEN)
    assert short.value is None and short.too_short and "a power reading averages up to the 1 s" in short.why
