"""A CONFIG's runs made into rows: per test, the steady samples by process, the first repetitions and the warm-up
apart, the judgement with the coverage, the bandwidth limit, energy over the same repetitions, host memory; then
every row's ratio to the baseline, and what --allow-pinned cost."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from buildmgr import backends
from buildmgr.bench import bandwidth, energy, limit, logs, rows
from buildmgr.bench.compare import first_usable
from buildmgr.bench.config import BenchRequest
from buildmgr.bench.judge import HOST, Judgement, Validity, partial, with_coverage, worst
from buildmgr.bench.prepare import Planned
from buildmgr.bench.process import Run, peak_of, test_key
from buildmgr.bench.sampling import Sample
from buildmgr.bench.stats import CV_WARN, geomean, ratio, summarize
from buildmgr.placement.cover import Covered
from buildmgr.placement.coverage import FA_AUTO_OFF
from buildmgr.store.receipt import FILE_NAME as RECEIPT


def _worst(judgements: Sequence[Judgement]) -> Judgement | None:
    state = worst(j.validity for j in judgements)
    return next((j for j in judgements if j.validity is state), None)


def _apart(lead: Sequence[float], steady: Sequence[float]) -> float | None:
    """The median of `lead` over the steady median, where it lies beyond the steady samples' range and more than 5 %
    off; else None."""
    if not lead or not steady:
        return None
    centre, median = statistics.median(lead), statistics.median(steady)
    if min(steady) <= centre <= max(steady) or abs(centre / median - 1) <= CV_WARN:
        return None
    return centre / median


def _first_apart(first: Sequence[float], steady: Sequence[float]) -> str | None:
    """A sentence where the first timed repetitions lie apart from the steady state."""
    found = _apart(first, steady)
    return None if found is None else f"first repetition {found:.2f}× of steady state: warm-up inside the process"


def steady_phases(phases: Sequence[logs.Phase]) -> list[logs.Phase]:
    """A process's timed phases of one test without its first repetition's (the first of each kind), which t/s keeps
    apart: energy is taken over the same repetitions as speed."""
    first = {
        kind: min((p for p in phases if p.kind == kind), key=lambda p: p.start) for kind in {p.kind for p in phases}
    }
    return [p for p in phases if p not in first.values()]


OUTLIER = 2.0  # a process this many times faster or slower than the others' median is named


def outlier_process(by_run: Sequence[Sequence[float]]) -> str | None:
    """A sentence naming the process farthest from the median of all (its geometric mean), where it is beyond OUTLIER:
    one such process decides a ratio's interval (262 t/s against ~150,000 gave [0.00, 51571.07], issue #48)."""
    means = [geomean(run) for run in by_run if run]
    if len(means) == 2 and not 1 / OUTLIER <= means[0] / means[1] <= OUTLIER:
        return f"its two processes differ {max(means) / min(means):.2g}×: the interval says little (run more)"
    if len(means) < 3:
        return None
    typical = statistics.median(means)
    index, mean = max(enumerate(means), key=lambda item: abs(math.log(item[1] / typical)))
    if 1 / OUTLIER <= mean / typical <= OUTLIER:
        return None
    return (
        f"process {index + 1} of {len(means)} ran at {mean:.4g} t/s, {mean / typical:.2g}× the median of all "
        f"({typical:.4g}): it alone widens the interval (other load on the host? run again)"
    )


def _warm_apart(warm: Sequence[float], steady: Sequence[float]) -> str | None:
    """A sentence where the warm-up process lies apart from the steady state."""
    found = _apart(warm, steady)
    return (
        None
        if found is None
        else f"warm-up process {found:.2f}× of steady state: a first process pays what later ones do not"
    )


def rows_of(
    planned: Planned,
    runs: list[Run],
    request: BenchRequest,
    environ: Mapping[str, str],
    host_notes: list[str],
    host: rows.HostRow,
    covered: Covered | None = None,
) -> list[rows.Row]:
    receipt = planned.build.prefix / RECEIPT
    failures = tuple({"round": r.round, "failure": r.failure, "tail": r.tail()} for r in runs if r.failure)
    runs_kept = [r for r in runs if not r.failure and r.round > 0]
    warmed = [r for r in runs if not r.failure and r.round == 0]
    fingerprint = hashlib.sha256(receipt.read_bytes()).hexdigest() if receipt.is_file() else None
    host_memory = _host_memory(planned, runs_kept, environ)
    warnings = (*sorted({w for r in runs for w in r.warnings}), *host_notes)
    enumeration = {v: environ[v] for v in backends.enumeration_variables() if v in environ}
    timing = tuple(
        rows.RunTiming(r.round, round(r.ran.seconds, 3), _s(r.startup_s), _s(r.load_s), _s(r.observer_cpu_s))
        for r in runs
    )
    load = runs_kept[-1].load if runs_kept else None
    held = limit.holdings(load, list(planned.devices)) if load is not None else ()
    peaks = bandwidth.per_device(planned.roles, host)
    made = []
    for number, test in enumerate(request.workload.tests(), 1):
        steady: list[int] = []
        first: list[float] = []
        by_run: list[tuple[float, ...]] = []
        judgements: list[Judgement] = []
        phases: list[logs.Phase] = []
        samples: list[Sample] = []
        template: dict[str, Any] | None = None
        engine: list[dict[str, Any]] = []
        tokens = (test[0] or 0) + (test[1] or 0)
        warm = [
            tokens * 1e9 / t
            for run in warmed
            for row in run.rows
            if test_key(row) == test
            for t in row.get("samples_ns") or []
            if t > 0
        ]
        for run in runs_kept:
            for index, row in enumerate(run.rows, 1):
                if test_key(row) != test:
                    continue
                template = template or row
                ns = row.get("samples_ns") or []
                first += [tokens * 1e9 / ns[0]] if ns else []
                steady += ns[1:]
                by_run.append(tuple(float(f"{tokens * 1e9 / t:.6g}") for t in ns[1:] if t > 0))
                judgements.append(run.judgements[index])
                engine += [{"round": run.round, **w.to_json()} for w in run.judgements[index].work]
                phases += steady_phases([p for p in run.phases if p.test == index])
                samples += run.samples
        worst = _worst(judgements)
        evidence: tuple[str, ...]
        if planned.blocked is not None:
            validity, evidence = Validity.NOT_RUN, (planned.blocked.line(),)
        elif not steady or worst is None:
            validity, evidence = Validity.FAILED, tuple(str(f["failure"]) for f in failures) or ("no kept run",)
        else:
            validity, evidence = worst.validity, worst.evidence
        found = covered.coverage if covered is not None else None
        graphs = [phase for phase, tokens in (("prefill", test[0]), ("decode", test[1])) if tokens]
        line = found.partial_in(graphs) if found is not None else None
        if line and validity in (Validity.VALID, Validity.UNPROVEN, Validity.FALLBACK):
            validity, evidence = with_coverage(validity, line), (f"partial: {line}", *evidence)
        base = template or {
            "n_prompt": test[0],
            "n_gen": test[1],
            "n_depth": test[2],
            "model_filename": str(planned.model),
            "build_commit": (planned.build.receipt.source.commit or "")[:7],
            "devices": "/".join(planned.config.placement.devices or ()) or "auto",
            "avg_ts": None,
            "samples_ts": [],
        }
        fields = rows.merge_timing(base, steady) if steady else dict(base)
        summary = summarize(fields.get("samples_ts") or [])
        apart = (
            _first_apart(first, fields.get("samples_ts") or []),
            _warm_apart(warm, fields.get("samples_ts") or []),
            outlier_process(by_run),
        )
        layers = partial(load)
        cpu_works = cpu_computes(planned, load)
        sampling = observer_share(runs_kept, template, cpu_works)
        notes = [n for n in (*apart, observer_note(sampling, runs_kept, template, request.interval)) if n]
        if layers:
            shown = next((h for h in held if h.device != limit.CPU), None)
            if shown is not None:
                notes.append(
                    f"partial offload: {shown.device} holds {layers[0]}/{layers[1]} layers "
                    f"({shown.share * 100:.0f} % of the weights)"
                )
        decode = test[1] and not test[0]
        found_limit = None
        if decode and load is not None and held:
            read = limit.read_per_token(held, load, number, test[2], test[1], planned.model_bytes)
            parallel = planned.config.placement.split_mode in ("row", "tensor")  # the devices read at once
            found_limit = limit.decode_limit(read, peaks, summary.median, parallel)
            if found_limit.unknown:
                notes.append(f"no bandwidth limit: {found_limit.unknown}")
            elif found_limit.percent is not None and found_limit.percent > 100:
                notes.append(
                    f"{found_limit.percent:.0f} % of the bandwidth limit: above it, so the limit counted bytes this "
                    "run did not read (a bug in buildmgr's limit: please report it with this row)"
                )
        spent, j_per_token = energy.of_test(planned.roles, phases, samples, test, cpu_works)
        first_summary = summarize(first)
        meta = rows.Meta(
            rows.SCHEMA,
            planned.config.label,
            planned.config.flags(),
            planned.build.id,
            fingerprint,
            planned.devices,
            enumeration,
            planned.env_set,
            validity,
            evidence,
            summary.to_json(),
            summary.noisy,
            tuple(round(v, 2) for v in warm),
            sum(1 for r in runs if r.round > 0),  # timed processes; the warm-up ones are apart
            failures,
            tuple(engine),
            host_memory,
            tuple(f.line() for f in planned.findings),
            warnings,
            first_ts=tuple(round(v, 2) for v in first),
            first_summary=first_summary.to_json() if first else None,
            runs_ts=tuple(by_run),
            timing=timing,
            host=host,
            holds=held,
            limit_ts=found_limit.limit_ts if found_limit else None,
            limit_percent=found_limit.percent if found_limit else None,
            limit=found_limit,
            energy=spent,
            j_per_token=j_per_token,
            notes=tuple(notes),
            coverage=covered.summary() if covered is not None else None,
            partial=line,
            observer_share=sampling,
        )
        made.append(rows.Row(fields, meta))
    return made


def cpu_computes(planned: Planned, load: logs.LoadLog | None) -> bool:
    """Whether the CPU computes part of the CONFIG: no device chosen, layers its load log left to the CPU, or an
    override keeping weights there."""
    return planned.config.cpu_overrides or bool(partial(load)) or any(r.name == HOST for r in planned.roles)


def observer_share(runs: Sequence[Run], row: Mapping[str, Any] | None, cpu_works: bool) -> float | None:
    """buildmgr's own CPU over the runs' time, where the CPU computes with a thread on every CPU this process may use:
    its sampling then takes turns with llama.cpp's threads, which wait for each other at every op (docs/real-runs.md,
    issue #48); None elsewhere."""
    spent = [(r.observer_cpu_s, r.ran.seconds) for r in runs if r.observer_cpu_s is not None and r.ran.seconds > 0]
    cpus = min((r.cpus for r in runs if r.cpus), default=None)
    threads = row.get("n_threads") if row is not None else None
    if not cpu_works or not spent or cpus is None or not isinstance(threads, int) or threads < cpus:
        return None
    return round(sum(c for c, _ in spent) / sum(s for _, s in spent), 4)


def observer_note(
    share: float | None, runs: Sequence[Run], row: Mapping[str, Any] | None, interval: float
) -> str | None:
    """Said where observer_share is known."""
    if share is None or row is None:
        return None
    cpus = min(r.cpus for r in runs if r.cpus)
    return (
        f"buildmgr's sampling used {share:.1%} of a CPU beside llama.cpp's {row['n_threads']} threads on {cpus} CPUs: "
        f"the CPU's part may read slower than alone (a larger --interval than {interval:g} s samples less)"
    )


def _s(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def _host_memory(planned: Planned, runs: Sequence[Run], environ: Mapping[str, str]) -> dict[str, Any]:
    """The load log's buffers and the process's peak memory. With the pinning guard set, a *_Host buffer is plain
    memory (ggml-cuda falls back to a CPU buffer but still logs the buffer type it asked for), so none is pinned."""
    load = runs[-1].load.to_json() if runs else None
    env = dict(environ) | planned.env_set
    guarded = bool(planned.guard) and all(env.get(k) == v for k, v in planned.guard.items())
    if load is not None and guarded:
        load["pinned_host_mib"] = 0.0
    return {
        "load_log": load,
        "pinning_guard": planned.guard if guarded else None,
        "process_peak_kib": peak_of(run.peak_kib for run in runs),
    }


def pinned_notes(planned: Sequence[Planned], made: Sequence[rows.Row], allowed: bool) -> list[str]:
    """What --allow-pinned cost: the host memory each CPU-override CONFIG page-locked, from its load log."""
    notes = []
    for p in planned if allowed else ():
        if not (p.guard and p.config.cpu_overrides):
            continue
        found = [r.meta.host_memory.get("load_log") for r in made if r.meta is not None and r.config == p.config.label]
        pinned = max((log.get("pinned_host_mib") or 0.0 for log in found if log), default=None)
        held = "an unknown amount of" if pinned is None else f"{pinned:.0f} MiB of"
        notes.append(f"--allow-pinned: {p.config.label} page-locked {held} host memory (not swappable while it ran)")
    return notes


def fa_auto_notes(covered: Mapping[str, Covered]) -> list[str]:
    """Each CONFIG whose -fa auto turned FlashAttention off, as its coverage run's log says."""
    return [
        f"{label}: {FA_AUTO_OFF}"
        for label, found in covered.items()
        if found.coverage is not None and found.coverage.flash_attn_auto is False
    ]


def with_baseline(made: list[rows.Row]) -> list[rows.Row]:
    """Each row with its ratio to the same test of the baseline on the same model: the first CONFIG whose rows are
    all valid, else the first that may be ranked, else the first (a fallback is a baseline only where all fell back)."""
    states: dict[str, dict[str, list[Validity]]] = {}
    for row in made:
        by_config = states.setdefault(rows.field_of(row, "model_filename"), {})
        by_config.setdefault(row.config, []).append(row.validity or Validity.VALID)
    first = {model: first_usable({c: worst(v) for c, v in configs.items()}) for model, configs in states.items()}
    base = {
        (rows.field_of(r, "model_filename"), rows.test_name(r.fields)): rows.units(r)
        for r in made
        if r.config == first[rows.field_of(r, "model_filename")]
    }
    compared = []
    for row in made:
        model = rows.field_of(row, "model_filename")
        own = row.config == first[model]
        r = None if own else ratio(base.get((model, rows.test_name(row.fields)), []), rows.units(row))
        assert row.meta is not None  # rows of this call carry buildmgr's part
        meta = dataclasses.replace(row.meta, baseline=first[model], vs_baseline=r.to_json() if r else None)
        compared.append(dataclasses.replace(row, meta=meta))
    return compared
