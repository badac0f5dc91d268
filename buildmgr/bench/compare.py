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
from buildmgr.bench.stats import Ratio, geomean, ratio, summarize
from buildmgr.errors import UserError

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
        return {
            "test": self.test,
            self.axis: self.value,
            "median_ts": self.summary_median,
            "limit_percent": self.limit_percent,
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


# --- exporters: one per format, over the one typed table ---------------------------------------------------------

COLUMNS = ("test", "median t/s", "% of limit", "cv", "n", "vs baseline", "J/token", "validity")


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
    share = share_text(entry.limit_percent) if entry.limit_percent is not None else "—"
    return [entry.test, entry.value + env, median, share, cv, str(entry.n), shown, joules, state]


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
        entry.limit_percent if entry.limit_percent is not None else "",
        entry.validity.value if entry.validity is not None else "",
        entry.partial or "",
        " ".join(f"{k}={v}" for k, v in sorted(entry.env_set.items())),
        entry.rows,
    ]


def export_csv(table: Sequence[Compared], axis: str) -> str:
    """The JSON's field names and values, one row per entry (cv a fraction, the ratio's interval in two cells)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["test", axis, *CSV_COLUMNS, "j_per_token", "limit_percent", "validity", "partial", "env_set", "rows"]
    )
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
