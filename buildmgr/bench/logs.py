"""What one llama-bench run printed, read: its `--progress` lines (when each test's timed phases began), its `-o jsonl`
rows, and its `-v` load log (the buffers per buffer type, the devices it used, the layers it offloaded). Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from buildmgr.placement.coverage import LAYER_LINE, OVERRIDE_LINE

_PROGRESS = re.compile(r"^llama-bench: benchmark (\d+)/(\d+): (.*)$")
# tools/llama-bench at the pin prints these before each timed phase, and "starting", "warmup … run" and "depth run"
# before the untimed ones.
TIMED = {"prompt run": "prompt", "generation run": "generation"}
_BUFFER = re.compile(r"^\s*\S+:\s+(\S+)\s+(\w+)\s+buffer size =\s*([\d.]+) MiB")
_USING = re.compile(r"using device (\S+) \(")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_CELLS = re.compile(r"llama_kv_cache: size =\s*[\d.]+ MiB \(\s*(\d+) cells")


class Event(NamedTuple):
    at: float  # time.monotonic() when the line arrived
    test: int  # 1-based, as llama-bench counts
    what: str  # "prompt run 1/1", "depth run 1/1 (cached)", "starting" …


class Phase(NamedTuple):
    test: int
    kind: str  # prompt | generation
    start: float
    end: float


def event(line: str, at: float) -> Event | None:
    match = _PROGRESS.match(line)
    return Event(at, int(match.group(1)), match.group(3).strip()) if match else None


def timed_kind(what: str) -> str | None:
    return next((kind for prefix, kind in TIMED.items() if what.startswith(prefix)), None)


def phases(events: list[Event], row_arrivals: list[float], end: float) -> list[Phase]:
    """Each timed phase from its progress line to the next line of any test (or the test's row, or the run's end)."""
    marks = sorted([(e.at, e.test, e.what) for e in events] + [(at, i + 1, "row") for i, at in enumerate(row_arrivals)])
    found = []
    for position, (at, test, what) in enumerate(marks):
        kind = timed_kind(what)
        if kind is not None:
            following = marks[position + 1][0] if position + 1 < len(marks) else end
            found.append(Phase(test, kind, at, following))
    return found


def spans(events: list[Event], row_arrivals: list[float], end: float) -> dict[int, tuple[float, float]]:
    """Each test from its first progress line (its model and context set up, warm-up included) to its row."""
    found: dict[int, tuple[float, float]] = {}
    for event_ in events:
        if event_.test not in found:
            done = row_arrivals[event_.test - 1] if event_.test <= len(row_arrivals) else end
            found[event_.test] = (event_.at, done)
    return found


def rows(stdout: str) -> list[dict[str, Any]]:
    """The `-o jsonl` rows, one per test, in order."""
    found = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


@dataclass(frozen=True)
class LoadLog:
    """From llama-bench -v: the largest size of each buffer per buffer type and kind (a context is made per test),
    the devices the model was loaded onto, and the layers offloaded to GPUs."""

    buffers: dict[str, dict[str, float]] = field(default_factory=dict)  # buffer type → kind (model, KV …) → MiB
    used: tuple[str, ...] = ()
    offloaded: tuple[int, int] | None = None  # (layers offloaded, layers)
    kv: dict[int, dict[str, float]] = field(default_factory=dict)  # test → buffer type → KV MiB (a context per test)
    cells: dict[int, int] = field(default_factory=dict)  # test → the KV cache's cells
    layers: dict[int, str] = field(default_factory=dict)  # layer → its device (the last: the output layer)
    overridden: dict[str, str] = field(default_factory=dict)  # tensor → the buffer type an -ot gave it

    def weights(self) -> dict[str, float]:
        """MiB of model buffer per buffer type."""
        return {name: kinds["model"] for name, kinds in self.buffers.items() if "model" in kinds}

    @property
    def pinned_mib(self) -> float:
        """Host memory in page-locked buffers (CUDA_Host, ROCm_Host …): a buffer type named *_Host."""
        return sum(sum(kinds.values()) for name, kinds in self.buffers.items() if name.endswith("_Host"))

    def to_json(self) -> dict[str, object]:
        return {
            "buffers_mib": self.buffers,
            "pinned_host_mib": round(self.pinned_mib, 2),
            "devices_used": list(self.used),
            "layers_offloaded": list(self.offloaded) if self.offloaded else None,
        }


def load_log(lines: Iterable[str]) -> LoadLog:
    buffers: dict[str, dict[str, float]] = {}
    used: list[str] = []
    offloaded = None
    kv: dict[int, dict[str, float]] = {}
    cells: dict[int, int] = {}
    layers: dict[int, str] = {}
    overridden: dict[str, str] = {}
    test = 0  # the progress lines in the same stream say which test's context a line is of
    for line in lines:
        if match := _PROGRESS.match(line):
            test = int(match.group(1))
        elif match := _BUFFER.match(line):
            kinds = buffers.setdefault(match.group(1), {})
            kinds[match.group(2)] = max(kinds.get(match.group(2), 0.0), float(match.group(3)))
            if match.group(2) == "KV":
                kv.setdefault(test, {})[match.group(1)] = float(match.group(3))
        elif match := _CELLS.search(line):
            cells[test] = int(match.group(1))
        elif match := _USING.search(line):
            if match.group(1) not in used:
                used.append(match.group(1))
        elif match := _OFFLOADED.search(line):
            offloaded = (int(match.group(1)), int(match.group(2)))
        elif match := LAYER_LINE.search(line):
            layers[int(match.group(1))] = match.group(2)
        elif match := OVERRIDE_LINE.search(line):
            overridden[match.group(1)] = match.group(2)
    return LoadLog(buffers, tuple(used), offloaded, kv, cells, layers, overridden)


def timing(events: list[Event], started: float) -> tuple[float | None, float | None]:
    """Seconds from the process's start to its first test (backends initialised), and the first test's model load
    and context (from its "starting" line to its next one)."""
    first = [e for e in events if e.test == events[0].test] if events else []
    startup = first[0].at - started if first else None
    load = first[1].at - first[0].at if len(first) > 1 else None
    return startup, load
