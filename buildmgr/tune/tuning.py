"""What every stage of one tune shares, passed as one: the request, the environment its processes run in, llama.cpp's
fit tool and what each device may hold, the vendors' engine readings and the host's record, and where the tune says
and keeps things (its notes, every run by candidate, coverage taken by flags)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from buildmgr.bench import rows
    from buildmgr.bench.process import Run
    from buildmgr.core.engines import EngineSource
    from buildmgr.placement.cover import Covered
    from buildmgr.tune.config import TuneRequest


@dataclass(frozen=True)
class Tuning:
    request: TuneRequest
    environ: Mapping[str, str]
    say: Callable[[str], None]
    started: float  # time.monotonic() when the tune began: its budget counts from here
    tool: Path  # llama-fit-params, whose estimates prune by memory
    ctx: int  # the context served
    capacity: Mapping[str, int | None]  # what each device may hold, MiB (None: no limit known)
    sources: list[EngineSource]
    host: rows.HostRow
    notes: list[str] = field(default_factory=list)  # said at the end, and written with the plan
    runs: dict[str, list[Run]] = field(default_factory=dict)  # every run, by candidate
    covered: dict[tuple[str, ...], Covered] = field(default_factory=dict)  # coverage taken, by flags without -t
