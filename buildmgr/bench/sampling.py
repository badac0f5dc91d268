"""What the host did while a benchmark ran, sampled: each vendor's engine readings (the backends open them), the
benchmark process's CPU time and memory from /proc, and the host's other processes that use a GPU or serve a
model. The readers take their root, so recorded /proc files replay in tests; `Sampler` is the thread that reads."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Self

from buildmgr.backend import process_name
from buildmgr.backends import EngineReading, EngineSource

# Process names of model servers that take a GPU (or the CPU) beside a benchmark.
SERVICES = ("llama-server", "ollama", "vllm", "text-generation-launcher", "sglang", "lmdeploy", "tritonserver")
# /proc/PID/status fields kept, in kB: anonymous vs file-backed resident memory, locked and pinned pages, the peak.
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmLck", "VmPin", "VmHWM")


class ProcessReading(NamedTuple):
    cpu_seconds: float | None  # utime + stime so far
    memory_kib: dict[str, int]  # STATUS_FIELDS present


# How often the cards' energy counters are read alone, between samples: a counter that moves in steps (an H100's
# every 0.1 s) is then timed by its own updates to within this, not to within a step (docs/real-runs.md, 2026-12-06).
COUNTER_INTERVAL = 0.01


class CounterReading(NamedTuple):
    at: float  # time.monotonic()
    pci_bus_id: str
    energy_mj: float


class Sample(NamedTuple):
    at: float  # time.monotonic()
    engines: tuple[EngineReading, ...]
    process: ProcessReading | None
    cpu_energy_mj: float | None = None  # the CPU packages' RAPL counters, where readable
    read_s: float | None = None  # how long reading it took: the sampler's own cost, beside the run it watches
    counters: tuple[CounterReading, ...] = ()  # the cards' counters read alone since the sample before, and with it


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


def _rapl(files: Sequence[Path]) -> float | None:
    """The packages' counters summed, in mJ (None where one cannot be read)."""
    total = 0.0
    for file in files:
        try:
            total += int(file.read_text()) / 1000
        except (OSError, ValueError):
            return None
    return total


@dataclass
class Sampler:
    """Reads every source and the watched process every `interval` seconds on its own thread, until stopped, and the
    cards' energy counters alone every COUNTER_INTERVAL between."""

    sources: list[EngineSource]
    interval: float
    pid: int | None = None
    samples: list[Sample] | None = None
    rapl: Sequence[Path] = ()  # the CPU's energy counters (membw.rapl_files)
    counted: frozenset[str] = frozenset()  # the cards (PCI ids) whose counters are read alone between samples

    def __post_init__(self) -> None:
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._left: tuple[CounterReading, ...] = ()  # counters read after the loop's last sample
        self._asked = False

    def read(self, counters: tuple[CounterReading, ...] = ()) -> Sample:
        started = time.monotonic()
        counters += tuple(self.count())  # read alone here too: no wider gap between two of them at a sample
        engines = tuple(r for source in self.sources for r in source.read())
        energy = _rapl(self.rapl) if self.rapl else None
        process = read_process(self.pid) if self.pid else None
        return Sample(started, engines, process, energy, time.monotonic() - started, counters)

    def count(self) -> list[CounterReading]:
        if not self.counted:
            return []
        at = time.monotonic()
        found = [CounterReading(at, pci, mj) for source in self.sources for pci, mj in source.counters(self.counted)]
        if not self._asked:  # a card no library reads a counter of is not asked again a hundred times a second
            self._asked, self.counted = True, frozenset(c.pci_bus_id for c in found)
        return found

    def _loop(self) -> None:
        assert self.samples is not None
        counters: list[CounterReading] = []
        due = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() >= due:
                self.samples.append(self.read(tuple(counters)))
                counters, due = [], time.monotonic() + self.interval
            else:
                counters += self.count()
            wait = due - time.monotonic()
            self._stop.wait(min(wait, COUNTER_INTERVAL) if self.counted else wait)
        self._left = tuple(counters)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        assert self.samples is not None
        self.samples.append(self.read(self._left))  # the reading that covers the run's last moments
