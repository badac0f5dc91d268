"""The results, as rows: one per test (a CONFIG's prefill, decode or both at one depth), with llama-bench's own
field names (so upstream's scripts read them) and buildmgr's under `buildmgr`, typed (`Row`, `Meta`) and written as
JSON only at the edge, read from any file (buildmgr's JSONL, llama-bench's `-o json` or `-o jsonl`); the fields a
comparison pairs rows by, and each row's samples and independent units. Pure, except `read_rows`."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from buildmgr.bench.energy import Energy
from buildmgr.bench.judge import Validity
from buildmgr.bench.limit import Holding, Limit
from buildmgr.bench.stats import geomean
from buildmgr.core.errors import UserError
from buildmgr.core.fsutil import read_user_text
from buildmgr.core.jsonshape import OMIT_IF_EMPTY, OMIT_IF_NONE, ShapeError, dump, load

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


@dataclass(frozen=True)
class CardRow:
    """A GPU of the host as its vendor's library reports it, with its peak memory bandwidth (None: unknown, and why)."""

    model: str
    pci_bus_id: str
    driver: str | None
    peak_gbs: float | None
    peak_basis: str


@dataclass(frozen=True)
class HostRow:
    """The machine a row was measured on: rows of different hosts are never pooled."""

    name: str
    cpu: str
    cards: tuple[CardRow, ...]
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
    # buildmgr's own CPU time beside it (its sampler and readers)
    observer_cpu_s: float | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class Meta:
    """buildmgr's part of a row: which CONFIG and build, how the devices were judged (validity and its evidence),
    the samples' summary, the warm-up, the engines' and the host's readings, and the ratio to the baseline (the
    first valid CONFIG on the same model)."""

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
    host: HostRow | None = field(default=None, metadata=OMIT_IF_NONE)
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
    # buildmgr's own CPU over its runs' time, where the CPU computes with a thread on every CPU (aggregate.observer_share)
    observer_share: float | None = field(default=None, metadata=OMIT_IF_NONE)


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
        return value.value if isinstance(value, Validity) else value.identity if isinstance(value, HostRow) else value
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


def share_text(percent: float) -> str:
    """A share of the bandwidth limit as every table and verdict shows it: one decimal, so 0.1 % is never "0 %"."""
    return f"{percent:.1f} %"


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
