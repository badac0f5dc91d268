"""tune's race against the exhaustive grid of the same space (`tune --grid`), from their two plans: the grid's
measure of tune's winner against the grid's best (a ratio with its 95 % interval over processes), the device time
of each (their llama-bench processes), and each winner against llama.cpp's own fit.

    python bench/tune_vs_grid.py GRID.json TUNE.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from buildmgr.bench.stats import ratio


def main() -> None:
    grid, tune = (json.loads(Path(name).read_text()) for name in sys.argv[1:3])
    for plan in (grid, tune):  # plans written before the figure was named for its unit
        for c in [*plan["candidates"], *([plan["winner"]] if plan["winner"] else [])]:
            c.setdefault("value", c.pop("ts", None))
    measured = {c["label"]: c for c in grid["candidates"] if c["units"]}
    best = max(measured.values(), key=lambda c: c["value"])
    unit = grid.get("unit", "t/s")
    chosen = tune["winner"]["label"]
    print(f"{tune['model']} ({tune['objective']} at depth {tune['depth']}, -c {tune['ctx']})")
    print(f"  candidates: {len(grid['candidates'])}, raced {len(measured)} in the grid")
    print(f"  grid's best: {best['label']} {best['value']:.4g} {unit} over {len(best['units'])} processes")
    print(f"  grid's winner (fit unless beaten): {grid['winner']['label']}")
    print(f"  tune's winner: {chosen} {tune['winner']['value']['value']:.4g} {unit} (its own race)")
    if chosen in measured:
        found = ratio(best["units"], measured[chosen]["units"])
        print(f"  the grid's measure of tune's winner over the grid's best: {found.text() if found else 'n/a'}")
    share = tune["run_seconds"] / grid["run_seconds"] if grid["run_seconds"] else float("nan")
    print(
        f"  device time (llama-bench processes): tune {tune['run_seconds']:.0f} s, grid {grid['run_seconds']:.0f} s"
        f" ({share:.1%}); whole calls {tune['seconds']:.0f} s and {grid['seconds']:.0f} s"
    )
    for name, plan in (("grid", grid), ("tune", tune)):
        versus = plan["winner"]["versus_fit"]
        if versus:
            print(f"  {name}'s winner over fit: {versus['ratio']}× {versus['ci95']}")


if __name__ == "__main__":
    main()
