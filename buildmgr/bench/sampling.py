"""What the host did while a benchmark ran, sampled: each vendor's engine readings (the backends open them), the
benchmark process's CPU time and memory from /proc, and the host's other processes that use a GPU or serve a
model. The readers take their root, so recorded /proc files replay in tests; `Sampler` is the thread that reads."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Self

from buildmgr.backends import EngineReading, EngineSource
from buildmgr.core.engines import process_name

# Process names of model servers that take a GPU (or the CPU) beside a benchmark.
SERVICES = ("llama-server", "ollama", "vllm", "text-generation-launcher", "sglang", "lmdeploy", "tritonserver")
# /proc/PID/status fields kept, in kB: anonymous vs file-backed resident memory, locked and pinned pages, the peak.
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmLck", "VmPin", "VmHWM")


class ProcessReading(NamedTuple):
    cpu_seconds: float | None  # utime + stime so far
    memory_kib: dict[str, int]  # STATUS_FIELDS present


# How often the cards' energy counters are read alone, between samples, while an update is awaited: a counter that
# moves in steps (an H100's every 0.1 s) is then timed by its own updates, not to within a step (docs/real-runs.md,
# 2026-12-06).
COUNTER_INTERVAL = 0.01
# A change between two reads at most this far apart times the update: at their midpoint, to within half of this (a
# loaded host's reads come late; each NVML read also takes time, an H100's 3 ms median, 5 ms mean).
BRACKET = 2 * COUNTER_INTERVAL
# Reading starts this long before an update is due (the last timed one plus the period): each NVML read costs the CPU
# (an H100: a third of a core at 100 reads a second, docs/real-runs.md 2026-12-06), and a few a step suffice. It covers
# a timed update's own half-bracket and a read's interval (simulated with reads up to 8 ms late and updates up to 3 ms:
# 27-33 reads a second of an H100's counter, every 0.62 s span within 3 %; measured: 36, 18 % of a core).
AHEAD = BRACKET / 2 + COUNTER_INTERVAL


class CounterReading(NamedTuple):
    at: float  # time.monotonic(), the middle of the call
    pci_bus_id: str
    energy_mj: float
    read_s: float | None = None  # how long the call took: what each read costs the sampler on this host


class CounterClock:
    """When to read one card's energy counter next: every COUNTER_INTERVAL until two updates in a row are timed (a
    change between reads within BRACKET), then from AHEAD of the next one due (the last timed update plus the median
    of the last periods) every COUNTER_INTERVAL until it comes. A change not timed (the read came too late) starts
    over, so a counter that moves faster than it was, or irregularly, is read every COUNTER_INTERVAL, as is one that
    moves faster than a read's window. Pure: the sampler tells it each reading."""

    def __init__(self) -> None:
        self.last: tuple[float, float] | None = None  # (at, mJ) of the last read, None after one that failed
        self.timed: float | None = None  # the last update, where it was timed
        self.periods: list[float] = []  # between timed updates in a row, the latest last
        self.read = False  # whether a read ever answered
        self.resume = 0.0  # when to read again after a read that failed

    def missed(self, at: float) -> None:
        """A read that failed: the next is COUNTER_INTERVAL on, and timing starts over."""
        self.last, self.timed, self.periods, self.resume = None, None, [], at + COUNTER_INTERVAL

    def seen(self, at: float, mj: float) -> None:
        if self.last is not None and mj != self.last[1]:
            if at - self.last[0] <= BRACKET:
                update = (self.last[0] + at) / 2
                if self.timed is not None:
                    self.periods = [*self.periods[-4:], update - self.timed]
                self.timed = update
            else:
                self.timed, self.periods = None, []
        self.last, self.read = (at, mj), True

    def next_at(self) -> float:
        if self.last is None:
            return self.resume
        poll = self.last[0] + COUNTER_INTERVAL
        if self.timed is None or not self.periods:
            return poll
        period = sorted(self.periods)[len(self.periods) // 2]
        if period < AHEAD + 2 * COUNTER_INTERVAL:
            return poll
        return max(poll, self.timed + period - AHEAD)


class Sample(NamedTuple):
    at: float  # time.monotonic()
    engines: tuple[EngineReading, ...]
    process: ProcessReading | None
    cpu_energy_mj: float | None = None  # the CPU packages' RAPL counters, where readable
    read_s: float | None = None  # how long reading it took: the sampler's own cost, beside the run it watches
    counters: tuple[CounterReading, ...] = ()  # the cards' counters read alone since the sample before


def read_process(pid: int, proc: Path = Path("/proc"), ticks: int | None = None) -> ProcessReading | None:
    """/proc/PID/stat's utime and stime (fields 14 and 15, after the parenthesised name) and /proc/PID/status."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        status = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    per_second = ticks or os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / per_second if len(fields) > 12 else None
    memory = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_FIELDS and value.split():
            memory[key] = int(value.split()[0])
    return ProcessReading(cpu, memory)


def cpu_times(proc: Path = Path("/proc")) -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat's first line; None where it is not there."""
    try:
        fields = [int(v) for v in (proc / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def services(proc: Path = Path("/proc"), skip: Sequence[int] = ()) -> list[tuple[int, str]]:
    """Processes whose name or command line names a model server (SERVICES)."""
    found = []
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        comm = process_name(int(entry.name), str(proc))
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        program = Path(argv[0].decode(errors="replace")).name if argv and argv[0] else ""
        words = {comm, program, *(Path(a.decode(errors="replace")).name for a in argv[1:3])}
        if any(name in words or any(w.startswith(name) for w in words if w) for name in SERVICES):
            found.append((int(entry.name), comm))
    return sorted(found)


@dataclass
class Sampler:
    """Reads every source and the watched process every `interval` seconds on its own thread, until stopped, and the
    cards' energy counters alone between, as each card's CounterClock asks."""

    sources: list[EngineSource]
    interval: float
    pid: int | None = None
    samples: list[Sample] | None = None
    cpu_energy: Callable[[], float | None] | None = None  # the CPU's energy in mJ (energy.cpu_reader)
    counted: frozenset[str] = frozenset()  # the cards (PCI ids) whose counters are read alone between samples

    def __post_init__(self) -> None:
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._left: tuple[CounterReading, ...] = ()  # counters read after the loop's last sample
        self._clocks = {pci: CounterClock() for pci in self.counted}

    def read(self, counters: tuple[CounterReading, ...] = ()) -> Sample:
        started = time.monotonic()
        engines = tuple(r for source in self.sources for r in source.read())
        energy = self.cpu_energy() if self.cpu_energy else None
        process = read_process(self.pid) if self.pid else None
        return Sample(started, engines, process, energy, time.monotonic() - started, counters)

    def count(self, now: float) -> list[CounterReading]:
        """The counters of the cards whose clocks ask for a reading by `now`, each card read on its own and stamped
        at the middle of its call (an NVML read takes milliseconds); a card never read (no library reads a counter
        of it) is not asked again."""
        found = []
        for pci, clock in list(self._clocks.items()):
            if clock.next_at() > now:
                continue
            began = time.monotonic()
            values = [mj for source in self.sources for card, mj in source.counters({pci}) if card == pci]
            ended = time.monotonic()
            at = (began + ended) / 2
            if values:
                clock.seen(at, values[0])
                found.append(CounterReading(at, pci, values[0], ended - began))
            elif clock.read:
                clock.missed(at)
            else:
                del self._clocks[pci]
        return found

    def _loop(self) -> None:
        assert self.samples is not None
        counters: list[CounterReading] = []
        due = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() >= due:
                self.samples.append(self.read(tuple(counters)))
                counters, due = [], time.monotonic() + self.interval
            counters += self.count(time.monotonic())
            wake = min([due, *(clock.next_at() for clock in self._clocks.values())])
            self._stop.wait(max(wake - time.monotonic(), 0.001))
        self._left = tuple(counters)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        assert self.samples is not None
        self.samples.append(self.read(self._left))  # the reading that covers the run's last moments
