"""The bench stage: each CONFIG checked against this host first, the host checked for other GPU users, then every
CONFIG run in turn (a warm-up process each, kept apart, then A B C A B C …) with llama-bench timing and buildmgr sampling, and the
rows, their samples and the verdicts written under `<data>/bench/`. The edge of the bench package: it reads and runs;
the modules it calls do not."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr import backends, identity, postmortem, proc
from buildmgr.bench import limit, logs, membw, rows
from buildmgr.bench.config import Asked, BenchConfig, Request, parse_config, read_toml, resolve
from buildmgr.bench.judge import BUSY_PERCENT, HOST, Judgement, Role, Validity, judge, partial, slowdowns, worst
from buildmgr.bench.judge import covered as with_coverage
from buildmgr.bench.sampling import Sample, Sampler, cpu_times, services
from buildmgr.bench.stats import CV_WARN, ratio, summarize
from buildmgr.crashes import Crash
from buildmgr.devices import Device
from buildmgr.devices import Role as DeviceRole
from buildmgr.errors import UserError
from buildmgr.findings import Finding, Severity, errors
from buildmgr.placement.check import check, memory_findings, model_devices, read_gguf, weights_per_device
from buildmgr.placement.cover import Covered, take
from buildmgr.receipt import FILE_NAME as RECEIPT

if TYPE_CHECKING:
    from buildmgr.config import Dirs
    from buildmgr.store import Build

TAIL_LINES = 15
BUSY_READINGS = 5  # engine readings taken before the first run to see whether another process keeps a GPU busy
# Over that window, other work on this share of all CPUs makes the host busy: on 2 cores one busy process (pyperf
# checks the system load before it trusts a number, for the same reason).
CPU_WINDOW_S = 0.5
CPU_BUSY_PERCENT = 40.0


@dataclass(frozen=True)
class Planned:
    """A CONFIG resolved on this host: its build, the devices the model gets (with their PCI ids), how each is
    judged, the environment its runs get, and what the placement check said."""

    config: BenchConfig
    build: Build
    model: Path
    roles: tuple[Role, ...]
    devices: dict[str, str | None]
    env_set: dict[str, str]
    findings: tuple[Finding, ...]
    guard: dict[str, str] = field(default_factory=dict)  # what would keep its backends from pinning host memory
    model_bytes: limit.ModelBytes | None = None  # each tensor's bytes, the vocabulary, the share of experts used

    @property
    def blocked(self) -> Finding | None:
        """The placement check's certain failure: the CONFIG is reported, not run."""
        return next(iter(errors(list(self.findings))), None)


@dataclass
class Run:
    """One llama-bench process of one CONFIG."""

    round: int  # 0: the discarded first run
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

    @property
    def failure(self) -> str | None:
        if self.crash is not None:
            return "; ".join((f"crashed: {self.crash.line()}", *self.crash.notes()))
        return None if self.ran.ok and self.rows else self.ran.failure() if not self.ran.ok else "printed no results"

    def tail(self) -> list[str]:
        return self.ran.stderr.strip().splitlines()[-TAIL_LINES:]


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
            "table": [entry.to_json() for entry in rows.compare(self.rows, "config")],
            "rows": [row.to_json() for row in self.rows],
            "exit_code": self.exit_code,
        }


# --- before anything runs ----------------------------------------------------------------------------------------


def prepare(asked: Asked, before_models: Callable[[], None] = lambda: None) -> tuple[Request, list[str]]:
    """The command line's CONFIGs and those of its file, and the models' contexts, read; then resolved (config)."""
    configs = [parse_config(text) for text in asked.configs]
    if asked.config_file is not None:
        configs += read_toml(asked.config_file)
    return resolve(asked, configs, model_context, before_models)


def model_context(model: Path) -> int | None:
    """The model's trained context from its GGUF header (no weights read); UserError if it is not a GGUF."""
    if model.is_dir():
        raise UserError(f"model {model} is a directory: name the GGUF file")
    if not model.is_file():
        raise UserError(f"model {model} does not exist")
    reader = read_gguf(model)
    arch = reader.fields.get("general.architecture")
    key = f"{bytes(arch.parts[-1]).decode()}.context_length" if arch is not None else None
    value = reader.fields.get(key) if key else None
    return int(value.parts[-1][0]) if value is not None else None


def plan(dirs: Dirs, request: Request, environ: Mapping[str, str]) -> list[Planned]:
    """Each CONFIG against its build's devices here, with the model; a name that is no device here is exit 2."""
    from buildmgr import store
    from buildmgr.placement.run import here_for

    planned = []
    for config in request.configs:
        build = store.find(dirs, config.build)
        build.installed_tool("llama-bench")
        here, _ = here_for(dirs, build, environ)
        found = check(config.placement, here)
        unknown = [f for f in found if f.rule == "invalid-device"]
        if unknown:
            raise UserError(f"CONFIG {config.label!r}: {unknown[0].message}; {unknown[0].fix}")
        chosen, _ = model_devices(config.placement, here)
        model = config.model(request.model)
        found += memory_findings(weights_per_device(config.placement, model, here, chosen), here)
        by_name = {d.name: d for d in here.devices}
        # With no device the CPU runs it, judged by the process's CPU time; with -ngl 0 the devices stay the
        # roles, so that their idle decode shows as the fallback it is.
        roles = roles_for(chosen, by_name, config.cpu_overrides)
        guard = backends.pinning_guards([by_name[n].backend for n in chosen])
        env_set = guard if config.cpu_overrides and not request.allow_pinned else {}
        devices = {n: identity.card_pci(by_name[n]) for n in chosen}
        read = model_bytes(model)
        planned.append(Planned(config, build, model, tuple(roles), devices, env_set, tuple(found), guard, read))
    return planned


def roles_for(chosen: Sequence[str], by_name: Mapping[str, Device], cpu_overrides: bool) -> list[Role]:
    """The devices a CONFIG runs on, as the judge reads them: each by its card's PCI id (a virtual device's engines
    are its card's), the host's CPU where none is chosen."""
    return [
        Role(n, identity.card_pci(by_name[n]), by_name[n].type == DeviceRole.CPU, cpu_overrides) for n in chosen
    ] or [Role(HOST, None, True)]


def model_bytes(model: Path) -> limit.ModelBytes:
    """From the GGUF header: each tensor's bytes, the vocabulary (token_embd's rows: a token reads one), and the share
    of its experts a token uses (`ARCH.expert_used_count` over `ARCH.expert_count`)."""
    reader = read_gguf(model)
    tensors = tuple((t.name, int(t.n_bytes)) for t in reader.tensors)
    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    vocab = int(embd.shape[-1]) if embd is not None and len(embd.shape) else 1
    arch = reader.fields.get("general.architecture")
    name = bytes(arch.parts[-1]).decode() if arch is not None else ""

    def number(key: str) -> int | None:
        found = reader.fields.get(f"{name}.{key}")
        return int(found.parts[-1][0]) if found is not None else None

    used, experts = number("expert_used_count"), number("expert_count")
    share = used / experts if used and experts else 1.0
    return limit.ModelBytes(tensors, vocab, share)


def bandwidths(planned: Planned, host: rows.Host) -> dict[str, tuple[float | None, str]]:
    """Each device's peak memory bandwidth and where it comes from: a card's from its vendor's library, a CPU-side
    device's (the CPU, lavapipe) and the CPU's own buffers from the host's measurement."""
    cards = {c.pci_bus_id: c for c in host.cards}
    found: dict[str, tuple[float | None, str]] = {limit.CPU: (host.cpu_gbs, host.cpu_basis)}
    for role in planned.roles:
        card = cards.get(role.pci_bus_id or "")
        if role.on_cpu:
            found[role.name] = (host.cpu_gbs, host.cpu_basis)
        elif card is not None:
            found[role.name] = (card.peak_gbs, card.peak_basis)
        else:
            found[role.name] = (None, "no vendor library reports this card")
    return found


def host_record(
    dirs: Dirs, sources: Sequence[backends.EngineSource], *, busy: bool = False, again: bool = False
) -> rows.Host:
    """This machine as rows record it: name, CPU, every card the vendors' libraries see, the CPU's bandwidth."""
    from buildmgr import hostfacts

    facts = hostfacts.read()
    cards = tuple(
        rows.Card(c.model, c.pci_bus_id, c.driver, c.peak_gbs, c.peak_basis) for s in sources for c in s.cards()
    )
    measured = membw.cpu_bandwidth(dirs.cache, facts.hostname, facts.cpu, busy=busy, again=again)
    return rows.Host(facts.hostname, facts.cpu, cards, measured.gbs, measured.basis)


def busy_host(sources: Sequence[backends.EngineSource], interval: float) -> list[str]:
    """Other processes on the GPUs, model servers running, GPUs kept busy by something, and CPUs busy with other
    work (which decides every CPU-side figure): each a sentence."""
    own = os.getpid()
    found = [f"{name} (pid {pid}) is using a GPU" for s in sources for pid, name in s.users() if pid != own]
    found += [f"{name} (pid {pid}) is running" for pid, name in services(skip=[own])]
    readings: dict[str, list[float]] = {}
    before = cpu_times()
    for _ in range(BUSY_READINGS):  # this process sleeps meanwhile: what the CPUs do is other work
        for source in sources:
            for reading in source.read():
                if reading.busy_percent is not None:
                    readings.setdefault(reading.pci_bus_id, []).append(reading.busy_percent)
        time.sleep(max(interval, CPU_WINDOW_S / BUSY_READINGS))
    after = cpu_times()
    if before is not None and after is not None and after[1] > before[1]:
        busy = (after[0] - before[0]) / (after[1] - before[1])
        if busy * 100 > CPU_BUSY_PERCENT:
            cores = busy * (os.cpu_count() or 1)
            found.append(f"the CPUs are {busy * 100:.0f} % busy with other work (about {cores:.1f} cores)")
    found += [
        f"GPU {pci} is {sum(v) / len(v):.0f} % busy before any run"
        for pci, v in sorted(readings.items())
        if v and sum(v) / len(v) > BUSY_PERCENT
    ]
    return found


# --- one run -----------------------------------------------------------------------------------------------------


def run_once(
    planned: Planned,
    request: Request,
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
    sampler = Sampler(sources, request.interval, rapl=membw.rapl_files())

    def on_line(stream: str, line: str, at: float) -> None:
        if stream == "stdout":
            if line.lstrip().startswith("{"):
                arrivals.append(at)
        elif (found := logs.event(line, at)) is not None:
            events.append(found)
            on_event(found)

    def on_start(pid: int) -> None:
        sampler.pid = pid

    started = time.monotonic()
    with sampler:
        ran = proc.watch(
            command,
            env=dict(environ) | planned.env_set,
            timeout=request.timeout,
            on_start=on_start,
            on_line=on_line,
        )
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
    peak = _peak(sample.process.memory_kib for sample in samples if sample.process)
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
    )


# --- the whole call ------------------------------------------------------------------------------------------------


def _test_key(row: Mapping[str, Any]) -> tuple[int, int, int]:
    return (row.get("n_prompt") or 0, row.get("n_gen") or 0, row.get("n_depth") or 0)


def _worst(judgements: Sequence[Judgement]) -> Judgement | None:
    state = worst(j.validity for j in judgements)
    return next((j for j in judgements if j.validity is state), None)


def _first_apart(first: Sequence[float], steady: Sequence[float]) -> str | None:
    """A sentence where the first timed repetitions lie beyond the steady state's spread (and more than 5 % off)."""
    if not first or not steady:
        return None
    lead, median = statistics.median(first), statistics.median(steady)
    beyond = lead < min(steady) or lead > max(steady)
    if not beyond or abs(lead / median - 1) <= CV_WARN:
        return None
    return f"first repetition {lead / median:.2f}× of steady state: warm-up inside the process"


def steady_phases(phases: Sequence[logs.Phase]) -> list[logs.Phase]:
    """A process's timed phases of one test without its first repetition's (the first of each kind), which t/s keeps
    apart: energy is taken over the same repetitions as speed."""
    first = {
        kind: min((p for p in phases if p.kind == kind), key=lambda p: p.start) for kind in {p.kind for p in phases}
    }
    return [p for p in phases if p not in first.values()]


def _warm_apart(warm: Sequence[float], steady: Sequence[float]) -> str | None:
    """A sentence where the warm-up process lies beyond the steady state's spread (and more than 5 % off)."""
    if not warm or not steady:
        return None
    lead, median = statistics.median(warm), statistics.median(steady)
    if min(steady) <= lead <= max(steady) or abs(lead / median - 1) <= CV_WARN:
        return None
    return f"warm-up process {lead / median:.2f}× of steady state: a first process pays what later ones do not"


def _rows_of(
    planned: Planned,
    runs: list[Run],
    request: Request,
    environ: Mapping[str, str],
    host_notes: list[str],
    host: rows.Host,
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
    timing = tuple(rows.RunTiming(r.round, round(r.ran.seconds, 3), _s(r.startup_s), _s(r.load_s)) for r in runs)
    load = runs_kept[-1].load if runs_kept else None
    held = limit.holdings(load, list(planned.devices)) if load is not None else ()
    bandwidth = bandwidths(planned, host)
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
            if _test_key(row) == test
            for t in row.get("samples_ns") or []
            if t > 0
        ]
        for run in runs_kept:
            for index, row in enumerate(run.rows, 1):
                if _test_key(row) != test:
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
        apart = (_first_apart(first, fields.get("samples_ts") or []), _warm_apart(warm, fields.get("samples_ts") or []))
        notes = [n for n in apart if n]
        layers = partial(load)
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
            found_limit = limit.decode_limit(read, bandwidth, summary.median, parallel)
            if found_limit.unknown:
                notes.append(f"no bandwidth limit: {found_limit.unknown}")
            elif found_limit.percent is not None and found_limit.percent > 100:
                notes.append(
                    f"{found_limit.percent:.0f} % of the bandwidth limit: above it, so the limit counted bytes this "
                    "run did not read (a bug in buildmgr's limit: please report it with this row)"
                )
        devices: dict[str, str | None] = {r.name: r.pci_bus_id for r in planned.roles if not r.on_cpu}
        devices[limit.CPU] = None  # the CPU's packages, by RAPL
        per_kind = {"prompt": test[0] or 0, "generation": test[1] or 0}
        energy = limit.energy(phases, samples, devices, per_kind) if phases else ()
        if any(e.device == limit.CPU and e.joules is None for e in energy) and not membw.rapl_files():
            energy = tuple(
                dataclasses.replace(e, unknown=membw.rapl_unreadable()) if e.device == limit.CPU else e for e in energy
            )
        # the CPU's counter counts where the CPU runs layers; elsewhere it may be unreadable (RAPL needs root)
        cpu_works = planned.config.cpu_overrides or bool(layers) or any(r.name == HOST for r in planned.roles)
        j_per_token = limit.per_token(energy, phases, per_kind, cpu_works)
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
            energy=energy,
            j_per_token=j_per_token,
            notes=tuple(notes),
            coverage=covered.summary() if covered is not None else None,
            partial=line,
        )
        made.append(rows.Row(fields, meta))
    return made


def cover(planned: Planned, request: Request, environ: Mapping[str, str], say: Callable[[str], None]) -> Covered:
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
        "process_peak_kib": _peak(run.peak_kib for run in runs),
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


def _peak(readings: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The highest of each memory figure over these readings (of samples, or of runs' peaks)."""
    peak: dict[str, int] = {}
    for reading in readings:
        for key, value in reading.items():
            peak[key] = max(peak.get(key, 0), value)
    return peak


def _with_baseline(made: list[rows.Row]) -> list[rows.Row]:
    """Each row with its ratio to the same test of the baseline on the same model: the first CONFIG whose rows are
    all valid, else the first that may be ranked, else the first (a fallback is a baseline only where all fell back)."""
    states: dict[str, dict[str, list[Validity]]] = {}
    for row in made:
        by_config = states.setdefault(rows.field_of(row, "model_filename"), {})
        by_config.setdefault(row.config, []).append(row.validity or Validity.VALID)
    first = {model: rows.first_usable({c: worst(v) for c, v in configs.items()}) for model, configs in states.items()}
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


def writable(path: Path, fix: str = "set XDG_DATA_HOME") -> None:
    """Before an hour of runs, not after: the results can be written (nothing is created until they are)."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"cannot write under {path} ({existing} is not a writable directory); {fix}")


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
                "engines": [r._asdict() for r in s.engines],
                "process": s.process._asdict() if s.process else None,
            }
            for s in run.samples
        ],
    }


def bench(
    dirs: Dirs,
    request: Request,
    environ: Mapping[str, str],
    say: Callable[[str], None],
    notes: Sequence[str],
    on_event: Callable[[str, int, logs.Event], None] = lambda label, round_, event: None,
) -> Result:
    """Plan, refuse a busy host, run every round of every CONFIG interleaved, and write the rows and samples."""
    from buildmgr.fsutil import atomic_write_bytes, atomic_write_text

    notes = list(notes)  # the caller's stay as they were; this call's are added to its own
    planned = plan(dirs, request, environ)
    writable(dirs.bench)
    sources = backends.open_engines()
    try:
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
                    bandwidths(p, host),
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
        for row in _rows_of(p, runs[p.config.label], request, environ, host_notes, host, covered.get(p.config.label))
    ]
    made = _with_baseline(made)
    for note in pinned_notes(planned, made, request.allow_pinned):
        notes.append(note)
        say(f"note: {note}")
    devices_of = {p.config.label: len(p.roles) for p in planned}
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = dirs.bench / f"{stamp}-{os.getpid()}.jsonl"
    samples_path = path.with_suffix(".samples.jsonl.gz")  # not matched by the rows' *.jsonl
    text = "".join(json.dumps(_samples_json(p, r)) + "\n" for p, r in executed)
    atomic_write_bytes(samples_path, gzip.compress(text.encode(), mtime=0))
    atomic_write_text(path, "".join(json.dumps(r.to_json()) + "\n" for r in made))
    return Result(made, rows.verdicts(made, devices_of), notes, path, samples_path)
