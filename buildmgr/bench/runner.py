"""The bench stage: each CONFIG checked against this host first, the host checked for other GPU users, then every
CONFIG run in turn (a warm-up process each, kept apart, then A B C A B C …) with llama-bench timing and buildmgr sampling, and the
rows, their samples and the verdicts written under `<data>/bench/`. The edge of the bench package: it reads and runs;
the modules it calls do not."""

from __future__ import annotations

import functools
import gzip
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr import backends
from buildmgr.bench import bandwidth, logs, rows
from buildmgr.bench.aggregate import fa_auto_notes, pinned_notes, rows_of, with_baseline
from buildmgr.bench.compare import compare
from buildmgr.bench.config import BenchRequest
from buildmgr.bench.judge import Validity, with_coverage
from buildmgr.bench.prepare import Planned, busy_host, host_record, plan
from buildmgr.bench.process import Run, run_once
from buildmgr.bench.verdicts import verdicts
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Severity
from buildmgr.placement.cover import Covered, take

if TYPE_CHECKING:
    from buildmgr.core.config import Dirs


@dataclass(frozen=True)
class Result:
    rows: list[rows.Row]
    verdicts: list[str]
    notes: list[str]
    path: Path
    samples_path: Path

    @property
    def exit_code(self) -> int:
        """1 where a CONFIG failed or was not run (its rows say why); fallbacks are results, flagged in their rows."""
        return int(any(r.validity in (Validity.FAILED, Validity.NOT_RUN) for r in self.rows))

    def to_json(self) -> dict[str, Any]:
        return {
            "file": str(self.path),
            "samples": str(self.samples_path),
            "notes": self.notes,
            "verdicts": self.verdicts,
            "table": [entry.to_json() for entry in compare(self.rows, "config")],
            "rows": [row.to_json() for row in self.rows],
            "exit_code": self.exit_code,
        }


def cover(planned: Planned, request: BenchRequest, environ: Mapping[str, str], say: Callable[[str], None]) -> Covered:
    """Where the CONFIG's ops run, taken once before its runs, in its own environment and with its own flags."""
    from buildmgr.placement.run import removed_kernels

    covered = take(
        planned.build.tool("llama-bench"),
        planned.model,
        planned.config.bench_args(),
        dict(environ) | planned.env_set,
        removed_kernels(planned.build),
        request.workload.n_prompt or 512,
    )
    found = covered.coverage
    if found is None:
        say(f"  {planned.config.label}: coverage not taken: {covered.failure}")
    else:
        splits = "/".join(str(g.splits) for g in found.graphs)
        say(f"  {planned.config.label}: coverage: {found.partial or 'every op on its device'} ({splits} splits)")
    return covered


def writable(path: Path, fix: str = "set XDG_DATA_HOME") -> None:
    """Before an hour of runs, not after: the results can be written (nothing is created until they are)."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot write under {path} ({existing} is not a writable directory); {fix}")


def write_samples(rows_path: Path, executed: Sequence[tuple[Planned, Run]]) -> Path:
    """Every process's samples and phases, one line each in the order they ran, gzip (no time in its header), beside
    the rows; its path."""
    from buildmgr.core.fsutil import atomic_write_bytes

    path = rows_path.with_suffix(".samples.jsonl.gz")  # not matched by the rows' *.jsonl
    text = "".join(json.dumps(_samples_json(p, r)) + "\n" for p, r in executed)
    atomic_write_bytes(path, gzip.compress(text.encode(), mtime=0))
    return path


def _samples_json(planned: Planned, run: Run) -> dict[str, Any]:
    return {
        "config": planned.config.label,
        "round": run.round,
        "spans": {test: [round(a - run.started, 4), round(b - run.started, 4)] for test, (a, b) in run.spans.items()},
        "phases": [
            {
                "test": p.test,
                "kind": p.kind,
                "start": round(p.start - run.started, 4),
                "end": round(p.end - run.started, 4),
            }
            for p in run.phases
        ],
        "samples": [
            {
                "t": round(s.at - run.started, 4),
                "read_ms": round(s.read_s * 1000, 3) if s.read_s is not None else None,
                "engines": [r._asdict() for r in s.engines],
                "process": s.process._asdict() if s.process else None,
                "counters": [
                    [round(c.at - run.started, 4), c.pci_bus_id, c.energy_mj]
                    + ([round(c.read_s * 1000, 3)] if c.read_s is not None else [])
                    for c in s.counters
                ],
            }
            for s in run.samples
        ],
    }


def open_host(
    dirs: Dirs,
    request: BenchRequest,
    sources: Sequence[backends.EngineSource],
    say: Callable[[str], None],
    notes: list[str],
) -> tuple[rows.HostRow, list[str]]:
    """Before the first run: a busy host refused (one line), the call's notes said, what the engines cannot read
    and an unknown CPU bandwidth noted; the host as rows record it, and the notes every row keeps."""
    busy = busy_host(sources, request.interval)
    if busy and not request.allow_busy:
        raise UserError("the host is busy: " + "; ".join(busy) + " (stop them, or pass --allow-busy)")
    for note in notes:  # after the refusal, which is one line
        say(f"note: {note}")
    host_notes = [f"busy host allowed: {b}" for b in busy]
    host_notes += [note for s in sources for note in s.limits()]
    if not sources:
        lacking = ", ".join(f"no {source}" for source in backends.engine_sources())
        notes.append(f"no GPU engine readings here ({lacking}): GPUs are judged as not readable")
        say(f"note: {notes[-1]}")
    host = host_record(dirs, sources, busy=bool(busy), again=request.remeasure)
    if host.cpu_gbs is None:
        notes.append(f"the CPU's bandwidth is unknown ({host.cpu_basis}): decode rows on it get no limit")
        say(f"note: {notes[-1]}")
    return host, host_notes


def bench(
    dirs: Dirs,
    request: BenchRequest,
    environ: Mapping[str, str],
    say: Callable[[str], None],
    notes: Sequence[str],
    on_event: Callable[[str, int, logs.Event], None] = lambda label, round_, event: None,
) -> Result:
    """Plan, refuse a busy host, run every round of every CONFIG interleaved, and write the rows and samples."""
    from buildmgr.core.fsutil import atomic_write_text

    notes = list(notes)  # the caller's stay as they were; this call's are added to its own
    planned = plan(dirs, request, environ)
    writable(dirs.bench)
    sources = backends.open_engines()
    try:
        host, host_notes = open_host(dirs, request, sources, say, notes)
        for p in planned:
            if p.blocked is not None:
                say(f"  not run: {p.config.label}: {p.blocked.line()}")
                continue
            for finding in p.findings:
                if finding.severity is Severity.WARNING:
                    say(f"  {p.config.label}: {finding.line()}")
        runnable = [p for p in planned if p.blocked is None]
        covered = {p.config.label: cover(p, request, environ, say) for p in runnable}
        runs: dict[str, list[Run]] = {p.config.label: [] for p in planned}
        executed: list[tuple[Planned, Run]] = []  # in the order they ran
        started = time.monotonic()
        rounds = request.workload.runs
        # round 0: the warm-up processes, each CONFIG's before any timed one
        for round_ in [0] * request.workload.warmup + list(range(1, rounds + 1)):
            for p in runnable:
                done = runs[p.config.label]
                if any(r.failure for r in done):
                    continue  # it failed once: its rows say so; the others go on
                run = run_once(
                    p,
                    request,
                    environ,
                    sources,
                    round_,
                    functools.partial(on_event, p.config.label, round_),
                    bandwidth.per_device(p.roles, host),
                )
                done.append(run)
                executed.append((p, run))
                what = f"run {round_}/{rounds}" if round_ else "warm-up (kept apart)"
                found = covered[p.config.label].coverage
                line = found.partial if found is not None else None  # of either graph: the rows say which
                judged = {with_coverage(j.validity, line).value for j in run.judgements.values()}
                outcome = run.failure or ", ".join(sorted(judged))
                say(
                    f"  {p.config.label}: {what}, depths {','.join(map(str, request.workload.depths))}: "
                    f"{run.ran.seconds:.1f} s, load {run.load_s or 0:.1f} s ({outcome}) · "
                    f"{time.monotonic() - started:.0f} s elapsed"
                )
    finally:
        for source in sources:
            source.close()
    made = [
        row
        for p in planned
        for row in rows_of(p, runs[p.config.label], request, environ, host_notes, host, covered.get(p.config.label))
    ]
    made = with_baseline(made)
    for note in fa_auto_notes(covered) + pinned_notes(planned, made, request.allow_pinned):
        notes.append(note)
        say(f"note: {note}")
    devices_of = {p.config.label: len(p.roles) for p in planned}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = dirs.bench / f"{stamp}-{os.getpid()}.jsonl"
    samples_path = write_samples(path, executed)
    atomic_write_text(path, "".join(json.dumps(r.to_json()) + "\n" for r in made))
    return Result(made, verdicts(made, devices_of), notes, path, samples_path)
