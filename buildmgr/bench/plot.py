"""`--plot FILE.png`: tokens/s against depth, one line per CONFIG and a panel per workload (prefill, decode, both),
fallback runs marked. matplotlib is an optional extra (`pip install 'buildmgr[plot]'`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from buildmgr.bench import rows
from buildmgr.bench.judge import Validity
from buildmgr.bench.stats import t975
from buildmgr.core.errors import UserError

INSTALL = "pip install 'buildmgr[plot]'"


def require(path: Path) -> None:
    """Before anything runs: a missing matplotlib or a place the picture cannot go is said at once, not after an
    hour of benchmarks."""
    from buildmgr.bench.runner import writable

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UserError(f"--plot needs matplotlib, an optional extra: {INSTALL}") from None
    if not path.parent.is_dir():  # a typo in the folder must not make a tree of folders
        raise UserError(f"--plot {path}: {path.parent} is not a directory; give --plot a path in an existing one")
    writable(path.parent, "give --plot a path in a writable directory")


def _interval(units: Sequence[float], median: float) -> tuple[float, float]:
    """The 95 % interval of the processes' geometric mean (none with one process: the bar is the point)."""
    if len(units) < 2:
        return median, median
    logs = [math.log(u) for u in units]
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    centre = statistics.fmean(logs)
    return min(median, math.exp(centre - half)), max(median, math.exp(centre + half))


def plot(made: Sequence[rows.Row], path: Path, title: str = "") -> None:
    import matplotlib.pyplot as plt

    figure = draw(made, title)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw(made: Sequence[rows.Row], title: str = "") -> Any:
    """The figure (matplotlib's, untyped), one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file is written
    import matplotlib.pyplot as plt

    panels = list(dict.fromkeys(rows.workload_name(r.fields) for r in made))
    figure, axes = plt.subplots(1, max(len(panels), 1), figsize=(5 * max(len(panels), 1), 4), squeeze=False)
    for axis, panel in zip(axes[0], panels, strict=False):
        lines: dict[str, list[tuple[int, float, bool, float, float, float | None]]] = {}
        for row in made:
            if rows.workload_name(row.fields) != panel or not rows.samples(row):
                continue
            median = statistics.median(rows.samples(row))
            low, high = _interval(rows.units(row), median)
            fallback = row.validity is Validity.FALLBACK
            label = (row.config or rows.axis_value(row, "build")) + row.env_tag
            if len({rows.field_of(r, "model_filename") for r in made}) > 1:
                label += f" [{rows.field_of(row, 'model_filename')}]"
            bound = row.meta.limit_ts if row.meta is not None else None
            lines.setdefault(label, []).append((row.fields.get("n_depth") or 0, median, fallback, low, high, bound))
        drawn_bounds: set[tuple[tuple[int, float], ...]] = set()  # two identical limit lines would hide each other
        for label, points in lines.items():
            points.sort()
            depths, medians = [p[0] for p in points], [p[1] for p in points]
            errors = [
                [m - p[3] for m, p in zip(medians, points, strict=True)],
                [p[4] - m for m, p in zip(medians, points, strict=True)],
            ]
            drawn = axis.errorbar(depths, medians, yerr=errors, marker="o", capsize=3, label=label).lines
            bounds = [(p[0], p[5]) for p in points if p[5]]
            if bounds and tuple(bounds) not in drawn_bounds:  # the memory-bandwidth limit of the same placement
                drawn_bounds.add(tuple(bounds))
                same = [other for other, ps in lines.items() if [(p[0], p[5]) for p in sorted(ps) if p[5]] == bounds]
                axis.plot([b[0] for b in bounds], [b[1] for b in bounds], linestyle="--", color=drawn[0].get_color(),
                          label=f"{' = '.join(same)}: bandwidth limit")  # fmt: skip
            bad = [p for p in points if p[2]]
            if bad:
                axis.scatter(
                    [p[0] for p in bad], [p[1] for p in bad], marker="x", s=120, color=drawn[0].get_color(), zorder=3
                )
        fell_back = any(p[2] for points in lines.values() for p in points)
        axis.set_title(f"{panel} ({'× = fallback; ' if fell_back else ''}bars: 95 % over processes)")
        # the medians and limits set the scale: an interval of 10⁰ to 10⁸ t/s would flatten every line (clipped)
        seen = [p[1] for ps in lines.values() for p in ps] + [p[5] for ps in lines.values() for p in ps if p[5]]
        if seen:
            axis.set_ylim(min(seen) / 3, max(seen) * 3)
        measured = sorted({p[0] for points in lines.values() for p in points})
        axis.set_xticks(measured)  # only the depths measured: one depth is not an axis from -0.04 to 0.04
        if len(measured) == 1:
            axis.set_xlim(measured[0] - 1, measured[0] + 1)
        axis.set_xlabel("depth (tokens in the context)")
        axis.set_ylabel("tokens/s (median, log scale)")
        axis.set_yscale("log")  # a CPU fallback and a GPU differ by 10-100×
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure
