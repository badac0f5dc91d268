"""A no-op `buildmgr build` (the prefix exists), two checkouts side by side in one run: before and after a change.

Usage: python bench/noop_startup.py BEFORE_DIR AFTER_DIR [RUNS]   (XDG_* must point at dirs where the build exists;
BEFORE_DIR is e.g. a `git worktree` of the previous commit). Alternates the two, so machine noise hits both alike.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    before, after = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    times: dict[str, list[float]] = {before: [], after: []}
    for _ in range(runs):
        for checkout in (before, after):
            env = dict(os.environ) | {"PYTHONPATH": checkout}
            start = time.perf_counter()
            result = subprocess.run(
                [sys.executable, "-m", "buildmgr", "build"], env=env, capture_output=True, text=True, check=False
            )
            times[checkout].append(time.perf_counter() - start)
            if "up to date" not in result.stderr:
                sys.exit(f"not a no-op in {checkout}: {result.stderr[-500:]}")
    for checkout, values in times.items():
        print(f"{checkout}: median {statistics.median(values):.3f} s, min {min(values):.3f} s over {runs}")
    print(f"after / before (medians): {statistics.median(times[after]) / statistics.median(times[before]):.2f}")


if __name__ == "__main__":
    main()
