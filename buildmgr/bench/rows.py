"""The results, as rows: one per test (a CONFIG's prefill, decode or both at one depth), with llama-bench's own
field names (so upstream's scripts read them) and buildmgr's under `buildmgr`. Rows from any file (buildmgr's
JSONL, llama-bench's `-o json` or `-o jsonl`) are paired along one axis and compared; the verdicts of a bench call
are made here. Pure, except `read_rows`."""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from buildmgr.bench.judge import Validity
from buildmgr.bench.stats import Ratio, compared, ratio, summarize
from buildmgr.errors import UserError

KEY = "buildmgr"
SCHEMA = 1
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
}
FORMATS = ("md", "json", "csv")
RANKED = (Validity.VALID.value, Validity.UNPROVEN.value)  # rows a comparison may rank; a fallback never wins
DEFAULTS = ("0.00", 0, "none", False)  # llama-bench's spelling of a field left at its default: not shown in a label


def field(row: dict, name: str) -> Any:
    if name.startswith(f"{KEY}."):
        return (row.get(KEY) or {}).get(name.split(".", 1)[1])
    value = row.get(name)
    return Path(value).name if name == "model_filename" and isinstance(value, str) else value


def workload_name(row: dict) -> str:
    """pp512, tg128 or pp512+tg128, as llama-bench names its tests."""
    p, n = row.get("n_prompt") or 0, row.get("n_gen") or 0
    return f"pp{p}+tg{n}" if p and n else f"pp{p}" if p else f"tg{n}"


def test_name(row: dict) -> str:
    return f"{workload_name(row)} @ d{row.get('n_depth') or 0}"


def axis_value(row: dict, axis: str) -> str:
    if axis == "config" and field(row, f"{KEY}.config"):
        return str(field(row, f"{KEY}.config"))
    fields = AXES.get(axis, (axis,))
    shown = [f for f in fields if field(row, f) is not None and (f == fields[0] or field(row, f) not in DEFAULTS)]
    return " ".join(f"{f.rsplit('.', 1)[-1]}={field(row, f)}" for f in shown) or "?"


def samples(row: dict) -> list[float]:
    values = row.get("samples_ts")
    if isinstance(values, list) and values:
        return [float(v) for v in values]
    return [float(row["avg_ts"])] if isinstance(row.get("avg_ts"), (int, float)) else []


def merge_timing(template: dict, ns: Sequence[int]) -> dict:
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


def read_rows(paths: Iterable[Path]) -> list[dict]:
    """buildmgr's JSONL, or llama-bench's `-o jsonl` (a row per line) or `-o json` (one array)."""
    found = []
    for path in paths:
        try:
            text = path.read_text()
        except OSError as err:
            raise UserError(f"cannot read {path}: {err.strerror}") from None
        try:
            data = (
                json.loads(text)
                if text.lstrip().startswith("[")
                else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            )
        except ValueError as err:
            raise UserError(f"{path} is neither JSON nor JSONL from llama-bench or buildmgr bench ({err})") from None
        rows = [r for r in data if isinstance(r, dict) and ("n_prompt" in r or "n_gen" in r)]
        if not rows:
            raise UserError(f"{path} has no llama-bench rows (each needs n_prompt, n_gen and avg_ts or samples_ts)")
        found += [r | {"_file": str(path)} for r in rows]
    return found


# --- comparing ---------------------------------------------------------------------------------------------------


def _key(row: dict, axis: str) -> tuple:
    free = set(AXES.get(axis, (axis,)))
    fields = [f for f in (*WORKLOAD_FIELDS, *BUILD_FIELDS, *PLACEMENT_FIELDS) if f not in free]
    return tuple((f, json.dumps(field(row, f), sort_keys=True)) for f in fields)


def compare(rows: Sequence[dict], axis: str, baseline: str | None = None) -> list[dict]:
    """Rows grouped by everything but the axis; within a group, each value of the axis against the first (or the
    `baseline` value) with its ratio and 95 % interval. Rows marked invalid are shown and never a baseline."""
    if axis not in AXES and not any(axis in r for r in rows):
        raise UserError(f"--by {axis!r}: one of {', '.join(AXES)}, or a field of the rows")
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for row in rows:
        groups.setdefault(_key(row, axis), {}).setdefault(axis_value(row, axis), []).append(row)
    values_seen = {value for members in groups.values() for value in members}
    if baseline is not None and baseline not in values_seen:
        raise UserError(
            f"--baseline {baseline!r} is no value of --by {axis} in these rows: {', '.join(sorted(values_seen))}"
        )
    table = []
    for members in groups.values():
        values = {value: [s for r in rs for s in samples(r)] for value, rs in members.items()}
        validity = {value: _validity(rs) for value, rs in members.items()}
        usable = [v for v in members if validity[v] in (*RANKED, "")]  # "": llama-bench's own rows
        base = baseline if baseline in usable else (usable[0] if usable else None)
        for value, rs in members.items():
            summary = summarize(values[value])
            r = ratio(values[base], values[value]) if base is not None and value != base else None
            table.append(
                {
                    "test": test_name(rs[0]),
                    axis: value,
                    "median_ts": summary.median,
                    "cv": summary.cv,
                    "n": summary.n,
                    "baseline": base,
                    "vs_baseline": r.to_json() if r else None,
                    "validity": validity[value],
                    "rows": len(rs),
                }
            )
    return table


def _validity(rows: Sequence[dict]) -> str:
    states = [field(r, f"{KEY}.validity") or "" for r in rows]
    return next((s for s in states if s not in (Validity.VALID.value, "")), states[0] if states else "")


def render(table: Sequence[dict], axis: str, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(table, indent=2)
    columns = ["test", axis, "median t/s", "cv", "n", "vs baseline", "validity"]
    lines = []
    for entry in table:
        r = entry["vs_baseline"]
        shown = (
            "baseline"
            if entry[axis] == entry["baseline"]
            else Ratio(r["ratio"], *(r["ci95"] or (None, None))).text()
            + (" (one run: no interval)" if r["ci95"] is None else " (noise)" if r["within_noise"] else "")
            if r
            else "—"
        )
        median = f"{entry['median_ts']:.2f}" if entry["median_ts"] is not None else "—"
        cv = f"{entry['cv'] * 100:.1f} %" if entry["cv"] is not None else "—"
        lines.append([entry["test"], str(entry[axis]), median, cv, str(entry["n"]), shown, entry["validity"] or "—"])
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(lines)
        return out.getvalue().rstrip("\n")
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    return "\n".join(
        [header, rule, *("| " + " | ".join(cell.replace("|", "\\|") for cell in line) + " |" for line in lines)]
    )


# --- verdicts ----------------------------------------------------------------------------------------------------


def _label(row: dict) -> str:
    return str(field(row, f"{KEY}.config"))


def verdicts(rows: Sequence[dict], devices_of: dict[str, int]) -> list[str]:
    """Per test at each depth: which CONFIG wins and by how much over the next; and for every split (a CONFIG over
    more than one device), whether it beats the best single device of this host at the same depth, by the rule
    operators of mixed hosts go by: a split that does not is not worth its failure modes."""
    models = {field(r, "model_filename") for r in rows}
    by_test: dict[str, list[dict]] = {}
    for row in rows:
        model = f" [{field(row, 'model_filename')}]" if len(models) > 1 else ""
        by_test.setdefault(test_name(row) + model, []).append(row)
    lines = []
    for test, members in by_test.items():
        usable = [r for r in members if field(r, f"{KEY}.validity") in RANKED and samples(r)]
        ranked = sorted(usable, key=lambda r: statistics.median(samples(r)), reverse=True)
        if not ranked:
            lines.append(f"{test}: no configuration gave a usable result")
            continue
        if len(ranked) == 1:
            lines.append(f"{test}: only {_label(ranked[0])} gave a usable result")
        else:
            lines.append(
                f"{test}: "
                + compared(ratio(samples(ranked[1]), samples(ranked[0])), _label(ranked[0]), _label(ranked[1]))
            )
        singles = [r for r in ranked if devices_of.get(_label(r)) == 1]
        for split in (r for r in ranked if devices_of.get(_label(r), 0) > 1):
            if not singles:
                lines.append(
                    f"{test}: split {_label(split)}: no single-device configuration was measured to compare with"
                )
                continue
            best = singles[0]
            r = ratio(samples(best), samples(split))
            if r is not None and not r.within_noise and r.value > 1:
                lines.append(f"{test}: split {_label(split)} beats the best single device {_label(best)} by {r.text()}")
            else:
                shown = r.text() if r else "?"
                lines.append(
                    f"{test}: split {_label(split)} is not worth it: {shown} of the best single device {_label(best)}"
                )
    return lines
