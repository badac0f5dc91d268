"""One llama-bench process of one CONFIG (`Run`): started with the sampler beside it, its progress lines turned into
timed phases, its rows, load log and each test's judgement read, and a run that died of a signal examined."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from buildmgr import backends
from buildmgr.bench import energy, limit, logs
from buildmgr.bench.config import BenchRequest
from buildmgr.bench.judge import Judgement, judge, slowdowns
from buildmgr.bench.prepare import Planned
from buildmgr.bench.sampling import Sample, Sampler
from buildmgr.core import proc
from buildmgr.core.crashes import Crash
from buildmgr.core.hostfacts import usable_cpus
from buildmgr.proof import postmortem

TAIL_LINES = 15


@dataclass
class Run:
    """One llama-bench process of one CONFIG."""

    round: int  # 0: a warm-up process, kept apart
    ran: proc.Ran
    rows: list[dict[str, Any]]  # llama-bench's own, as it printed them
    judgements: dict[int, Judgement]  # by test, 1-based as llama-bench counts
    load: logs.LoadLog
    peak_kib: dict[str, int]
    warnings: list[str]
    samples: list[Sample] = field(repr=False, default_factory=list)
    phases: list[logs.Phase] = field(repr=False, default_factory=list)
    spans: dict[int, tuple[float, float]] = field(repr=False, default_factory=dict)
    started: float = 0.0
    startup_s: float | None = None
    load_s: float | None = None
    crash: Crash | None = None  # what a post-mortem found, where llama-bench died of a signal
    observer_cpu_s: float | None = None  # buildmgr's own CPU time while it ran (the sampler, the readers)
    cpus: int | None = None  # the CPUs this process could use

    @property
    def failure(self) -> str | None:
        if self.crash is not None:
            return "; ".join((f"crashed: {self.crash.line()}", *self.crash.notes()))
        return None if self.ran.ok and self.rows else self.ran.failure() if not self.ran.ok else "printed no results"

    def tail(self) -> list[str]:
        return self.ran.stderr.strip().splitlines()[-TAIL_LINES:]


# --- one run -----------------------------------------------------------------------------------------------------


def timed_cards(planned: Planned, request: BenchRequest) -> frozenset[str]:
    """The cards (PCI ids) whose energy counters the sampler reads alone between its samples: the placement's, where
    the request asks for energy timed so."""
    if not request.timed_energy:
        return frozenset()
    return frozenset(r.pci_bus_id for r in planned.roles if r.pci_bus_id and not r.on_cpu)


def run_once(
    planned: Planned,
    request: BenchRequest,
    environ: Mapping[str, str],
    sources: list[backends.EngineSource],
    round_: int,
    on_event: Callable[[logs.Event], None] = lambda event: None,
    bandwidth: Mapping[str, tuple[float | None, str]] | None = None,
) -> Run:
    bench = planned.build.tool("llama-bench")
    command = [str(bench), "-m", str(planned.model), *request.workload.args(), "-o", "jsonl"]
    command += ["--progress", "-v", *planned.config.bench_args()]
    events: list[logs.Event] = []
    arrivals: list[float] = []
    sampler = Sampler(sources, request.interval, cpu_energy=energy.cpu_reader(), counted=timed_cards(planned, request))

    def on_line(stream: str, line: str, at: float) -> None:
        if stream == "stdout":
            if line.lstrip().startswith("{"):
                arrivals.append(at)
        elif (found := logs.event(line, at)) is not None:
            events.append(found)
            on_event(found)

    def on_start(pid: int) -> None:
        sampler.pid = pid

    started, cpu_before = time.monotonic(), time.process_time()
    with sampler:
        ran = proc.watch(
            command,
            env=dict(environ) | planned.env_set,
            timeout=request.timeout,
            on_start=on_start,
            on_line=on_line,
        )
    observer = time.process_time() - cpu_before
    samples = list(sampler.samples or [])
    found_rows = logs.rows(ran.stdout)
    load = logs.load_log(ran.stderr.splitlines())
    phases = logs.phases(events, arrivals, started + ran.seconds)
    spans = logs.spans(events, arrivals, started + ran.seconds)
    # each device's expected share of a token's time, from what this run's load log says it holds
    held = limit.holdings(load, list(planned.devices))
    weights = limit.read_per_token(held, load, 0, 0, 0, planned.model_bytes)
    expected = limit.time_shares(weights, bandwidth or {}) if held else {}
    judgements = {
        test: judge(
            [p for p in phases if p.test == test],
            samples,
            planned.roles,
            request.interval,
            load,
            expected,
        )
        for test in range(1, len(found_rows) + 1)
    }
    peak = peak_of(sample.process.memory_kib for sample in samples if sample.process)
    placed = {pci for pci in planned.devices.values() if pci}
    warnings = slowdowns(samples, placed)
    startup, load_s = logs.timing(events, started)
    crash = None
    if ran.started and ran.returncode < 0 and not ran.timed_out:  # a signal: where it died, once, under gdb
        device = postmortem.device_of(list(planned.devices))
        crash = postmortem.examine(command, ran, dict(environ) | planned.env_set, device, extra=False)
    return Run(
        round_,
        ran,
        found_rows,
        judgements,
        load,
        peak,
        warnings,
        samples,
        phases,
        spans,
        started,
        startup,
        load_s,
        crash,
        observer,
        usable_cpus(),
    )


def test_key(row: Mapping[str, Any]) -> tuple[int, int, int]:
    return (row.get("n_prompt") or 0, row.get("n_gen") or 0, row.get("n_depth") or 0)


def peak_of(readings: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The highest of each memory figure over these readings (of samples, or of runs' peaks)."""
    peak: dict[str, int] = {}
    for reading in readings:
        for key, value in reading.items():
            peak[key] = max(peak.get(key, 0), value)
    return peak
