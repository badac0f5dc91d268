"""The results, as rows: one per test (a CONFIG's prefill, decode or both at one depth), with llama-bench's own
field names (so upstream's scripts read them) and buildmgr's under `buildmgr`, typed (`Row`, `Meta`) and written as
JSON only at the edge. Rows from any file (buildmgr's JSONL, llama-bench's `-o json` or `-o jsonl`) are paired along
one axis and compared (`Compared`), shown by one exporter per format; the verdicts of a bench call are made here.
Pure, except `read_rows`."""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildmgr.bench.judge import Validity, worst
from buildmgr.bench.limit import Energy, Holding, Limit
from buildmgr.bench.stats import Ratio, compared, geomean, ratio, summarize
from buildmgr.errors import UserError
from buildmgr.fsutil import read_user_text
from buildmgr.jsonshape import OMIT_IF_EMPTY, OMIT_IF_NONE, ShapeError, dump, load

KEY = "buildmgr"
FILE = "_file"  # what a row read from a file says of its file (--by _file compares two runs of one CONFIG)
HOST = "host"  # the axis of rows of one build and placement on different machines
SCHEMA = 3  # 2: several repetitions per process (first_ts, runs_ts), the host, the limit and energy; 3: a card once
# in `energy` (schema 2 read it once per name of the card, so a split over two names of one card counted it twice)
# What a llama-bench row's timing is made of: recomputed over the kept samples when rows of several runs are merged.
TIMING = ("avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts")
# The fields that make two rows the same test, and what each --by axis lets differ (the rest must be equal).
BUILD_FIELDS = ("build_commit", "backends", f"{KEY}.build_id")
PLACEMENT_FIELDS = (
    "devices",
    "split_mode",
    "main_gpu",
    "tensor_split",
    "tensor_buft_overrides",
    "n_gpu_layers",
    "n_cpu_moe",
    "no_host",
)
WORKLOAD_FIELDS = (
    "model_filename", "model_type", "n_batch", "n_ubatch", "n_threads", "type_k", "type_v", "no_kv_offload",
    "flash_attn", "no_op_offload", "embeddings", "n_prompt", "n_gen", "n_depth",
)  # fmt: skip
AXES: dict[str, tuple[str, ...]] = {
    "config": (
        f"{KEY}.config",
        *BUILD_FIELDS,
        *PLACEMENT_FIELDS,
        "n_threads",
        "flash_attn",
        "type_k",
        "type_v",
        "n_batch",
        "n_ubatch",
        "no_kv_offload",
        "no_op_offload",
    ),
    "build": BUILD_FIELDS,
    "devices": ("devices", "tensor_split", "main_gpu"),
    "split_mode": ("split_mode",),
    "overrides": ("tensor_buft_overrides", "n_cpu_moe"),
    "depth": ("n_depth",),
    HOST: (f"{KEY}.host", "cpu_info", "gpu_info"),
}
# rows a comparison may rank (a partial one says so beside its name); a fallback never wins
RANKED = (Validity.VALID, Validity.PARTIAL, Validity.UNPROVEN)
# What `--rank` orders each group by, best first: throughput (higher is better) or energy per token (lower is).
RANKS = ("ts", "j_per_token")
DEFAULTS = ("0.00", 0, "none", False)  # llama-bench's spelling of a field left at its default: not shown in a label
# What the only environment bench sets is for: said beside every number of a CONFIG it was set for.
PINNING_GUARD = (
    "bench's pinning guard for CPU-override CONFIGs (page-locked host memory cannot be swapped, and has starved shared"
    " hosts); llama.cpp run by hand page-locks, which can be faster: --allow-pinned measures that"
)


@dataclass(frozen=True)
class Card:
    """A GPU of the host as its vendor's library reports it, with its peak memory bandwidth (None: unknown, and why)."""

    model: str
    pci_bus_id: str
    driver: str | None
    peak_gbs: float | None
    peak_basis: str


@dataclass(frozen=True)
class Host:
    """The machine a row was measured on: rows of different hosts are never pooled."""

    name: str
    cpu: str
    cards: tuple[Card, ...]
    cpu_gbs: float | None  # the CPU's read bandwidth, measured once per host
    cpu_basis: str

    @property
    def identity(self) -> str:
        """What makes two hosts the same one: name, CPU, and each card with its driver (not the bandwidths)."""
        cards = ", ".join(f"{c.model} {c.pci_bus_id} {c.driver or '?'}" for c in self.cards)
        return f"{self.name} ({self.cpu}{'; ' + cards if cards else ''})"


@dataclass(frozen=True)
class RunTiming:
    """Where one llama-bench process's time went: to its first test (backends initialised), its first model load and
    context, and the rest (warm-ups, depth fills, the timed repetitions)."""

    round: int
    seconds: float
    startup_s: float | None
    load_s: float | None


@dataclass(frozen=True)
class Meta:
    """buildmgr's part of a row: which CONFIG and build, how the devices were judged (validity and its evidence),
    the samples' summary, the warm-up, the engines' and the host's readings, and the ratio to the call's first CONFIG."""

    schema: int
    config: str
    flags: str
    build_id: str
    receipt_sha256: str | None
    devices: dict[str, str | None]  # name → PCI bus id
    enumeration_env: dict[str, str]
    env_set: dict[str, str]  # what its runs were given (the pinning guard)
    validity: Validity
    evidence: tuple[str, ...]
    summary: dict[str, Any]
    noisy: bool
    # the warm-up process's t/s (round 0), never pooled with the timed ones; schema 1: its discarded first round
    warmup_ts: tuple[float, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    runs: int = 0
    failures: tuple[dict[str, Any], ...] = ()
    engine: tuple[dict[str, Any], ...] = ()
    host_memory: dict[str, Any] = field(default_factory=dict)
    checks: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    baseline: str | None = None  # the CONFIG it is compared with
    vs_baseline: dict[str, Any] | None = None
    # schema 2: the steady-state samples by process (the unit of repetition), each process's first timed repetition
    first_ts: tuple[float, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    first_summary: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    runs_ts: tuple[tuple[float, ...], ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    timing: tuple[RunTiming, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    host: Host | None = field(default=None, metadata=OMIT_IF_NONE)
    holds: tuple[Holding, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    limit_ts: float | None = field(default=None, metadata=OMIT_IF_NONE)
    limit_percent: float | None = field(default=None, metadata=OMIT_IF_NONE)
    limit: Limit | None = field(default=None, metadata=OMIT_IF_NONE)
    energy: tuple[Energy, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    j_per_token: float | None = field(default=None, metadata=OMIT_IF_NONE)  # every device's, in the test's phases
    notes: tuple[str, ...] = field(default=(), metadata=OMIT_IF_EMPTY)
    # where its ops ran, taken once before its runs (placement.cover): splits, bytes copied per token, ops off their
    # layers' device; its `partial` line where the CPU ran some
    coverage: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    partial: str | None = field(default=None, metadata=OMIT_IF_NONE)  # what of its test's graph the CPU ran


@dataclass(frozen=True)
class Row:
    """One test's result: llama-bench's row as it prints it, and buildmgr's `Meta` (None in llama-bench's own)."""

    fields: dict[str, Any]
    meta: Meta | None = None
    file: str = field(default="", compare=False)  # the file it was read from

    @property
    def validity(self) -> Validity | None:
        return self.meta.validity if self.meta is not None else None

    @property
    def config(self) -> str:
        return self.meta.config if self.meta is not None else ""

    @property
    def env_tag(self) -> str:
        """The environment bench gave its runs, beside its name wherever its number is shown: " [K=V]"."""
        env = self.meta.env_set if self.meta is not None else {}
        return f" [{' '.join(f'{k}={v}' for k, v in sorted(env.items()))}]" if env else ""

    @property
    def partial(self) -> str | None:
        """What its coverage found on the CPU, where its validity is partial."""
        if self.meta is None or self.meta.validity is not Validity.PARTIAL:
            return None
        return self.meta.partial

    def to_json(self) -> dict[str, Any]:
        return self.fields | ({KEY: dump(self.meta)} if self.meta is not None else {})

    @classmethod
    def from_json(cls, data: dict[str, Any], file: str = "") -> Row:
        """A row as buildmgr or llama-bench wrote it; ShapeError where its `buildmgr` part is of another shape."""
        fields = {k: v for k, v in data.items() if k != KEY}
        meta: Meta | None = load(Meta, data[KEY], KEY) if isinstance(data.get(KEY), dict) else None
        return cls(fields, meta, file)


def field_of(row: Row, name: str) -> Any:
    """A field by llama-bench's name, or buildmgr's as `buildmgr.NAME` (a state by its value, as files say it)."""
    if name.startswith(f"{KEY}."):
        value = getattr(row.meta, name.split(".", 1)[1], None) if row.meta is not None else None
        return value.value if isinstance(value, Validity) else value.identity if isinstance(value, Host) else value
    if name == KEY:
        return dump(row.meta) if row.meta is not None else None
    if name == FILE:
        return row.file or None
    value = row.fields.get(name)
    return Path(value).name if name == "model_filename" and isinstance(value, str) else value


def workload_name(fields: dict[str, Any]) -> str:
    """pp512, tg128 or pp512+tg128, as llama-bench names its tests."""
    p, n = fields.get("n_prompt") or 0, fields.get("n_gen") or 0
    return f"pp{p}+tg{n}" if p and n else f"pp{p}" if p else f"tg{n}"


def test_name(fields: dict[str, Any]) -> str:
    return f"{workload_name(fields)} @ d{fields.get('n_depth') or 0}"


def axis_value(row: Row, axis: str) -> str:
    if axis == "config" and row.config:
        return row.config
    if axis == HOST:
        return host_of(row)
    fields = AXES.get(axis, (axis,))
    shown = [f for f in fields if field_of(row, f) is not None and (f == fields[0] or field_of(row, f) not in DEFAULTS)]
    return " ".join(f"{f.rsplit('.', 1)[-1]}={field_of(row, f)}" for f in shown) or "?"


def host_of(row: Row) -> str:
    """The host's identity: buildmgr's record, else what llama-bench's own row says of the CPU and GPUs."""
    if row.meta is not None and row.meta.host is not None:
        return row.meta.host.identity
    shown = [str(row.fields[f]) for f in ("cpu_info", "gpu_info") if row.fields.get(f)]
    return "; ".join(shown) or "unknown host"


def units(row: Row) -> list[float]:
    """The row's independent measurements, one per process (samples inside one process are not independent): the
    geometric mean of each process's steady-state samples. buildmgr's schema-1 rows ran one repetition per process,
    so each sample is one; llama-bench's own row is one process."""
    if row.meta is not None and row.meta.runs_ts:
        return [geomean(run) for run in row.meta.runs_ts if run]
    values = samples(row)
    if row.meta is not None:
        return values
    return [geomean(values)] if values else []


def samples(row: Row) -> list[float]:
    values = row.fields.get("samples_ts")
    if isinstance(values, list) and values:
        return [float(v) for v in values]
    average = row.fields.get("avg_ts")
    return [float(average)] if isinstance(average, (int, float)) else []


def merge_timing(template: dict[str, Any], ns: Sequence[int]) -> dict[str, Any]:
    """A llama-bench row whose timing is these samples, computed as llama-bench computes it (t/s per sample from
    the tokens of the test, then mean and sample stdev of each)."""
    tokens = (template.get("n_prompt") or 0) + (template.get("n_gen") or 0)
    ts = [tokens * 1e9 / t for t in ns if t > 0]
    return template | {
        "avg_ns": int(statistics.fmean(ns)) if ns else None,
        "stddev_ns": int(statistics.stdev(ns)) if len(ns) > 1 else 0,
        "avg_ts": statistics.fmean(ts) if ts else None,
        "stddev_ts": statistics.stdev(ts) if len(ts) > 1 else 0.0,
        "samples_ns": list(ns),
        "samples_ts": [float(f"{t:.6g}") for t in ts],  # as llama-bench prints them: six significant digits
    }


# --- reading -----------------------------------------------------------------------------------------------------


def read_rows(paths: Iterable[Path]) -> list[Row]:
    """buildmgr's JSONL, or llama-bench's `-o jsonl` (a row per line) or `-o json` (one array)."""
    found: list[Row] = []
    for path in paths:
        text = read_user_text(path)
        try:
            data = (
                json.loads(text)
                if text.lstrip().startswith("[")
                else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            )
        except ValueError as err:
            raise UserError(f"{path} is neither JSON nor JSONL from llama-bench or buildmgr bench ({err})") from None
        made = [r for r in data if isinstance(r, dict) and ("n_prompt" in r or "n_gen" in r)]
        if not made:
            raise UserError(f"{path} has no llama-bench rows (each needs n_prompt, n_gen and avg_ts or samples_ts)")
        try:
            found += [Row.from_json(r, str(path)) for r in made]
        except ShapeError as err:
            raise UserError(f"{path}: a row's buildmgr part is not one this buildmgr reads ({err})") from None
    return found


# --- comparing ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compared:
    """One value of the axis within a group of otherwise equal rows, against the group's baseline."""

    test: str
    axis: str
    value: str
    summary_median: float | None
    cv: float | None
    n: int
    baseline: str | None
    vs_baseline: Ratio | None
    validity: Validity | None  # the worst of its rows; None: llama-bench's own
    rows: int
    j_per_token: float | None = None  # the median of its rows' (None: no row could read its energy)
    partial: str | None = None  # what ran on the CPU, where its validity is partial
    env_set: dict[str, str] = field(default_factory=dict)  # what bench set for its runs (the pinning guard)

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test,
            self.axis: self.value,
            "median_ts": self.summary_median,
            "j_per_token": self.j_per_token,
            "cv": self.cv,
            "n": self.n,
            "baseline": self.baseline,
            "vs_baseline": self.vs_baseline.to_json() if self.vs_baseline else None,
            "validity": self.validity.value if self.validity is not None else "",
            "partial": self.partial,
            "env_set": self.env_set,
            "rows": self.rows,
        }


def _key(row: Row, axis: str) -> tuple[tuple[str, str], ...]:
    free = set(AXES.get(axis, (axis,)))
    fields = [f for f in (*WORKLOAD_FIELDS, *BUILD_FIELDS, *PLACEMENT_FIELDS) if f not in free]
    host = () if axis == HOST else ((HOST, host_of(row)),)  # rows of different hosts are never pooled
    return tuple((f, json.dumps(field_of(row, f), sort_keys=True)) for f in fields) + host


def compare(rows: Sequence[Row], axis: str, baseline: str | None = None, rank: str | None = None) -> list[Compared]:
    """Rows grouped by everything but the axis; within a group, each value of the axis against the first (or the
    `baseline` value) with its ratio and 95 % interval, and with `rank` ordered best first by that measure (rows
    marked invalid and values without it last). Rows marked invalid are shown and never a baseline."""
    if axis not in AXES and not any(axis in r.fields or field_of(r, axis) is not None for r in rows):
        raise UserError(f"--by {axis!r}: one of {', '.join(AXES)}, or a field of the rows")
    groups: dict[tuple[tuple[str, str], ...], dict[str, list[Row]]] = {}
    for row in rows:
        groups.setdefault(_key(row, axis), {}).setdefault(axis_value(row, axis), []).append(row)
    values_seen = {value for members in groups.values() for value in members}
    if baseline is not None and baseline not in values_seen:
        raise UserError(
            f"--baseline {baseline!r} is no value of --by {axis} in these rows: {', '.join(sorted(values_seen))}"
        )
    table: list[Compared] = []
    for members in groups.values():
        values = {value: [s for r in rs for s in samples(r)] for value, rs in members.items()}
        independent = {value: [u for r in rs for u in units(r)] for value, rs in members.items()}
        validity = {value: worst(r.validity for r in rs if r.validity is not None) for value, rs in members.items()}
        usable = [v for v in members if validity[v] is None or validity[v] in RANKED]  # None: llama-bench's own
        base = baseline if baseline in usable else first_usable(validity) if usable else None
        group = []
        for value, rs in members.items():
            summary = summarize(values[value])
            r = ratio(independent[base], independent[value]) if base is not None and value != base else None
            energies = [r.meta.j_per_token for r in rs if r.meta is not None and r.meta.j_per_token is not None]
            group.append(
                Compared(
                    test_name(rs[0].fields),
                    axis,
                    value,
                    summary.median,
                    summary.cv,
                    summary.n,
                    base,
                    r,
                    validity[value],
                    len(rs),
                    statistics.median(energies) if energies else None,
                    next((p for r in rs if (p := r.partial)), None),
                    next((r.meta.env_set for r in rs if r.meta is not None and r.meta.env_set), {}),
                )
            )
        table += sorted(group, key=_ranking(rank)) if rank is not None else group
    return table


def _ranking(rank: str) -> Callable[[Compared], tuple[bool, float]]:
    """The sort key of `rank`: usable entries with the measure first, best first."""

    def key(entry: Compared) -> tuple[bool, float]:
        measure = entry.j_per_token if rank == "j_per_token" else entry.summary_median
        usable = entry.validity is None or entry.validity in RANKED
        if measure is None or not usable:
            return (True, 0.0)
        return (False, measure if rank == "j_per_token" else -measure)

    return key


def first_usable(validity: Mapping[str, Validity | None]) -> str:
    """The baseline among values in their order: the first valid one (None: llama-bench's own, not judged), else the
    first that may be ranked, else the first."""
    order = list(validity)
    valid = [v for v in order if validity[v] in (Validity.VALID, None)]
    ranked = [v for v in order if validity[v] in RANKED]
    return (valid or ranked or order)[0]


# --- exporters: one per format, over the one typed table ---------------------------------------------------------

COLUMNS = ("test", "median t/s", "cv", "n", "vs baseline", "J/token", "validity")


def _cells(entry: Compared) -> list[str]:
    r = entry.vs_baseline
    shown = (
        "baseline"
        if entry.value == entry.baseline
        else r.rounded().text() + (" (one run: no interval)" if r.low is None else " (noise)" if r.within_noise else "")
        if r
        else "—"
    )
    median = f"{entry.summary_median:.2f}" if entry.summary_median is not None else "—"
    cv = f"{entry.cv * 100:.1f} %" if entry.cv is not None else "—"
    joules = f"{entry.j_per_token:.4g}" if entry.j_per_token is not None else "—"
    state = entry.validity.value if entry.validity is not None else "—"
    state += f": {entry.partial}" if entry.partial else ""
    env = f" [{' '.join(f'{k}={v}' for k, v in sorted(entry.env_set.items()))}]" if entry.env_set else ""
    return [entry.test, entry.value + env, median, cv, str(entry.n), shown, joules, state]


def _columns(axis: str) -> list[str]:
    return [COLUMNS[0], axis, *COLUMNS[1:]]


def export_json(table: Sequence[Compared], axis: str) -> str:
    return json.dumps([entry.to_json() for entry in table], indent=2)


CSV_COLUMNS = ("median_ts", "cv", "n", "baseline", "vs_baseline", "ci95_low", "ci95_high", "within_noise")


def _numbers(entry: Compared) -> list[object]:
    """The JSON's fields as plain cells, for a spreadsheet: numbers as numbers, nothing as an empty cell."""
    shown = entry.vs_baseline.rounded() if entry.vs_baseline else None
    noise = "" if entry.vs_baseline is None else str(entry.vs_baseline.within_noise).lower()
    return [
        entry.test,
        entry.value,
        *(v if v is not None else "" for v in (entry.summary_median, entry.cv, entry.n, entry.baseline)),
        *(v if v is not None else "" for v in ((shown.value, shown.low, shown.high) if shown else (None,) * 3)),
        noise,
        entry.j_per_token if entry.j_per_token is not None else "",
        entry.validity.value if entry.validity is not None else "",
        entry.partial or "",
        " ".join(f"{k}={v}" for k, v in sorted(entry.env_set.items())),
        entry.rows,
    ]


def export_csv(table: Sequence[Compared], axis: str) -> str:
    """The JSON's field names and values, one row per entry (cv a fraction, the ratio's interval in two cells)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["test", axis, *CSV_COLUMNS, "j_per_token", "validity", "partial", "env_set", "rows"])
    writer.writerows(_numbers(entry) for entry in table)
    return out.getvalue().rstrip("\n")


def export_markdown(table: Sequence[Compared], axis: str) -> str:
    columns = _columns(axis)
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    lines = ["| " + " | ".join(cell.replace("|", "\\|") for cell in _cells(entry)) + " |" for entry in table]
    return "\n".join([header, rule, *lines])


EXPORTERS: dict[str, Callable[[Sequence[Compared], str], str]] = {
    "md": export_markdown,
    "json": export_json,
    "csv": export_csv,
}
FORMATS = tuple(EXPORTERS)


def render(table: Sequence[Compared], axis: str, fmt: str) -> str:
    return EXPORTERS[fmt](table, axis)


# --- verdicts ----------------------------------------------------------------------------------------------------


def verdicts(rows: Sequence[Row], devices_of: dict[str, int]) -> list[str]:
    """Per test at each depth: which CONFIG wins and by how much over the next; and for every split (a CONFIG over
    more than one device), whether it beats the best single device of this host at the same depth, by the rule
    operators of mixed hosts go by: a split that does not is not worth its failure modes. One statistic ranks and
    compares (the geometric mean over processes, the unit of repetition); a difference inside the noise is "cannot
    tell", and a winner that is partial or unproven says so beside its name."""
    models = {field_of(r, "model_filename") for r in rows}
    by_test: dict[str, list[Row]] = {}
    for row in rows:
        model = f" [{field_of(row, 'model_filename')}]" if len(models) > 1 else ""
        by_test.setdefault(test_name(row.fields) + model, []).append(row)
    lines = []
    for test, members in by_test.items():
        usable = [r for r in members if r.validity in RANKED and units(r)]
        ranked = sorted(usable, key=lambda r: geomean(units(r)), reverse=True)
        named = {r.config: r.config + r.env_tag + _tag(r) for r in ranked}
        if not ranked:
            lines.append(f"{test}: no configuration gave a usable result")
            continue
        if len(ranked) == 1 and len({r.config for r in members}) == 1:
            pass  # one CONFIG alone: nothing was compared, and nothing failed
        elif len(ranked) == 1:
            lines.append(f"{test}: only {named[ranked[0].config]} gave a usable result")
        else:
            lines.append(
                f"{test}: "
                + compared(ratio(units(ranked[1]), units(ranked[0])), named[ranked[0].config], named[ranked[1].config])
            )
        singles = [r for r in ranked if devices_of.get(r.config) == 1]
        for split in (r for r in ranked if devices_of.get(r.config, 0) > 1):
            name = named[split.config]
            if not singles:
                lines.append(f"{test}: split {name}: no single-device configuration was measured to compare with")
                continue
            best = singles[0]
            r = ratio(units(best), units(split))
            against = f"the best single device {named[best.config]}"
            if r is None or r.low is None:
                shown = f"{r.text()} in one run each" if r else "too few samples"
                lines.append(f"{test}: split {name} against {against}: {shown}: too few runs to tell")
            elif r.within_noise:
                lines.append(f"{test}: split {name} cannot be told from {against} ({r.text()}: inside the noise)")
            elif r.value > 1:
                lines.append(f"{test}: split {name} beats {against} by {r.text()}")
            else:
                lines.append(f"{test}: split {name} is not worth it: {r.text()} of {against}")
    partial = {r.config: r.partial for r in rows if r.partial}
    lines += [f"{config} is partial: {line}" for config, line in partial.items()]
    guarded = {r.config: r.env_tag.strip(" []") for r in rows if r.env_tag}
    lines += [f"{config} ran with {env}: {PINNING_GUARD}" for config, env in guarded.items()]
    return lines


def _tag(row: Row) -> str:
    """Beside a ranked CONFIG's name: what keeps its number from being the device's alone, or from being proven."""
    return {Validity.PARTIAL: " (partial)", Validity.UNPROVEN: " (unproven)"}.get(row.validity or Validity.VALID, "")
