"""Rows compared: grouped by everything but one axis, each value against the first valid one (or a baseline asked
for) with its ratio and 95 % interval, ranked by speed or energy where asked, and written as a table in markdown,
JSON or CSV from the one typed `Compared` list. Pure."""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from buildmgr.bench.judge import Validity, worst
from buildmgr.bench.rows import (
    AXES,
    BUILD_FIELDS,
    HOST,
    PLACEMENT_FIELDS,
    RANKED,
    WORKLOAD_FIELDS,
    Row,
    axis_value,
    field_of,
    host_of,
    samples,
    share_text,
    test_name,
    units,
    workload_name,
)
from buildmgr.bench.stats import Ratio, RatioVerdict, geomean, ratio, summarize
from buildmgr.core.errors import UserError

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
    limit_percent: float | None = None  # a decode's median share of its bandwidth limit (None: none, or no limit)
    typical_ts: float | None = None  # the geometric mean over processes: what ranks, as the ratio compares it

    def to_json(self) -> dict[str, Any]:
        return {self.axis if c.key == AXIS else c.key: c.value(self) for c in COLUMNS_OF_TABLE}


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
    # a value's state over all its rows of one model, as bench's own baseline takes it (aggregate.with_baseline): one
    # baseline for every test of a model, not one per test
    overall: dict[tuple[str, str], list[Validity]] = {}
    for row in rows:
        if row.validity is not None:
            overall.setdefault((str(field_of(row, "model_filename")), axis_value(row, axis)), []).append(row.validity)
    table: list[Compared] = []
    for members in groups.values():
        values = {value: [s for r in rs for s in samples(r)] for value, rs in members.items()}
        independent = {value: [u for r in rs for u in units(r)] for value, rs in members.items()}
        validity = {value: worst(r.validity for r in rs if r.validity is not None) for value, rs in members.items()}
        usable = [v for v in members if validity[v] is None or validity[v] in RANKED]  # None: llama-bench's own
        model = str(field_of(next(iter(members.values()))[0], "model_filename"))
        whole = {v: worst(overall.get((model, v), [])) if validity[v] is not None else None for v in members}
        base = baseline if baseline in usable else first_usable(whole) if usable else None
        group = []
        for value, rs in members.items():
            summary = summarize(values[value])
            r = ratio(independent[base], independent[value]) if base is not None and value != base else None
            typical = geomean(independent[value]) if independent[value] else None
            energies = [r.meta.j_per_token for r in rs if r.meta is not None and r.meta.j_per_token is not None]
            group.append(
                Compared(
                    _label(rs, axis),
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
                    limit_share(rs),
                    typical,
                )
            )
        table += sorted(group, key=_ranking(rank)) if rank is not None else group
    return table


def _label(members: Sequence[Row], axis: str) -> str:
    """The test as the table names it: without its depth where depth is the axis, and with its CONFIG where the axis
    is another (rows of two CONFIGs would look alike)."""
    label = workload_name(members[0].fields) if axis in ("depth", "n_depth") else test_name(members[0].fields)
    configs = sorted({r.config for r in members if r.config})
    return label + (f" [{'/'.join(configs)}]" if configs and axis != "config" else "")


def unpaired(members: Sequence[Row], axis: str) -> list[str]:
    """Why rows of llama-bench's own were not compared with buildmgr's, where both were read: their hosts are told
    apart differently, and rows of two hosts are never pooled."""
    own = [r for r in members if r.meta is None]
    if not own or len(own) == len(members) or axis == HOST:
        return []
    return [
        f"{len(own)} row(s) of llama-bench's own were compared only among themselves: llama-bench names the host by "
        "cpu_info and gpu_info, buildmgr by its host record (name, CPU, each card with its driver), and rows of two "
        "hosts are never pooled; --by host sets them side by side"
    ]


def limit_share(members: Sequence[Row]) -> float | None:
    """The median of the rows' shares of their bandwidth limit (decode rows have one)."""
    shares = [r.meta.limit_percent for r in members if r.meta is not None and r.meta.limit_percent is not None]
    return round(statistics.median(shares), 1) if shares else None


def _ranking(rank: str) -> Callable[[Compared], tuple[bool, float]]:
    """The sort key of `rank`: usable entries with the measure first, best first."""

    def key(entry: Compared) -> tuple[bool, float]:
        measure = entry.j_per_token if rank == "j_per_token" else entry.typical_ts
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


# --- exporters: one registry of columns, read by each format ------------------------------------------------------

AXIS = "AXIS"  # the key of the axis's own column: the axis's name in each format


def _or_empty(value: object) -> object:
    return "" if value is None else value


@dataclass(frozen=True)
class Column:
    """One field of the compared table, declared once: its JSON value under `key`, its CSV cells (`csv_keys`, by
    default the key alone, holding the JSON value), and, where `title` is set, its cell in the md table."""

    key: str
    value: Callable[[Compared], object]
    title: str | None = None
    cell: Callable[[Compared], str] | None = None
    csv_keys: tuple[str, ...] = ()
    csv_cells: Callable[[Compared], list[object]] | None = None

    def csv_header(self, axis: str) -> list[str]:
        return list(self.csv_keys) or [axis if self.key == AXIS else self.key]

    def csv(self, entry: Compared) -> list[object]:
        return self.csv_cells(entry) if self.csv_cells else [_or_empty(self.value(entry))]


def _env_words(entry: Compared) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(entry.env_set.items()))


def _ratio_cell(entry: Compared) -> str:
    r = entry.vs_baseline
    if entry.value == entry.baseline:
        return "baseline"
    if r is None:
        return "—"
    verdict = RatioVerdict.of(r)
    return r.rounded().text() + ("" if verdict is RatioVerdict.APART else f" ({verdict.said})")


def _ratio_cells(entry: Compared) -> list[object]:
    """The ratio, its interval in two cells, and whether it is inside the noise (rounded as in JSON)."""
    r = entry.vs_baseline.rounded() if entry.vs_baseline else None
    noise = "" if entry.vs_baseline is None else str(entry.vs_baseline.within_noise).lower()
    return [*(_or_empty(v) for v in ((r.value, r.low, r.high) if r else (None,) * 3)), noise]


def _number(spec: str, scale: float = 1.0, unit: str = "") -> Callable[[float | None], str]:
    return lambda v: "—" if v is None else f"{v * scale:{spec}}{unit}"


_median, _cv, _joules = _number(".2f"), _number(".1f", 100, " %"), _number(".4g")

COLUMNS_OF_TABLE: tuple[Column, ...] = (
    Column("test", lambda e: e.test, "test", lambda e: e.test),
    Column(AXIS, lambda e: e.value, AXIS, lambda e: e.value + (f" [{_env_words(e)}]" if e.env_set else "")),
    Column("median_ts", lambda e: e.summary_median, "median t/s", lambda e: _median(e.summary_median)),
    Column(
        "limit_percent",
        lambda e: e.limit_percent,
        "% of limit",
        lambda e: share_text(e.limit_percent) if e.limit_percent is not None else "—",
    ),
    Column("j_per_token", lambda e: e.j_per_token, "J/token", lambda e: _joules(e.j_per_token)),
    Column("cv", lambda e: e.cv, "cv", lambda e: _cv(e.cv)),
    Column("n", lambda e: e.n, "n", lambda e: str(e.n)),
    Column("baseline", lambda e: e.baseline),
    Column(
        "vs_baseline",
        lambda e: e.vs_baseline.to_json() if e.vs_baseline else None,
        "vs baseline",
        _ratio_cell,
        ("vs_baseline", "ci95_low", "ci95_high", "within_noise"),
        _ratio_cells,
    ),
    Column(
        "validity",
        lambda e: e.validity.value if e.validity is not None else "",
        "validity",
        lambda e: (e.validity.value if e.validity is not None else "—") + (f": {e.partial}" if e.partial else ""),
    ),
    Column("partial", lambda e: e.partial),
    Column("env_set", lambda e: e.env_set, csv_cells=lambda e: [_env_words(e)]),
    Column("rows", lambda e: e.rows),
)


def export_json(table: Sequence[Compared], axis: str) -> str:
    return json.dumps([entry.to_json() for entry in table], indent=2)


def export_csv(table: Sequence[Compared], axis: str) -> str:
    """The JSON's fields and values, one row per entry (cv a fraction, the ratio's interval in two cells)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([name for column in COLUMNS_OF_TABLE for name in column.csv_header(axis)])
    writer.writerows([cell for column in COLUMNS_OF_TABLE for cell in column.csv(entry)] for entry in table)
    return out.getvalue().rstrip("\n")


def export_markdown(table: Sequence[Compared], axis: str) -> str:
    shown = [column for column in COLUMNS_OF_TABLE if column.title is not None and column.cell is not None]
    header = "| " + " | ".join(axis if c.title == AXIS else str(c.title) for c in shown) + " |"
    rule = "|" + "|".join("---" for _ in shown) + "|"
    lines = ["| " + " | ".join(c.cell(entry).replace("|", "\\|") for c in shown if c.cell) + " |" for entry in table]
    return "\n".join([header, rule, *lines])


EXPORTERS: dict[str, Callable[[Sequence[Compared], str], str]] = {
    "md": export_markdown,
    "json": export_json,
    "csv": export_csv,
}
FORMATS = tuple(EXPORTERS)


def render(table: Sequence[Compared], axis: str, fmt: str) -> str:
    return EXPORTERS[fmt](table, axis)
