"""A no-op `buildmgr build` (the prefix exists), two checkouts side by side in one run: before and after a change.

Usage: python bench/noop_startup.py BEFORE_DIR AFTER_DIR [RUNS] [-- BUILD ARGS…]   (XDG_* must point at dirs where
the build exists; BEFORE_DIR is e.g. a `git worktree` of the previous commit; BUILD ARGS default to none, i.e. cpu).
NOOP_DATA_BEFORE / NOOP_DATA_AFTER, where set, are each side's XDG_DATA_HOME (a receipt schema one side cannot read).
Alternates the two, so machine noise hits both alike. Both are byte-compiled first, as an install is: without that,
a machine with PYTHONDONTWRITEBYTECODE=1 (this one) compiles every module on every run (45 ms of a no-op).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time


def main() -> None:
    split = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
    args, build_args = sys.argv[1:split], sys.argv[split + 1 :]
    before, after = args[0], args[1]
    runs = int(args[2]) if len(args) > 2 else 15
    times: dict[str, list[float]] = {before: [], after: []}
    for checkout in (before, after):  # as pip installs it: with bytecode, even where PYTHONDONTWRITEBYTECODE is set
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", os.path.join(checkout.split(os.pathsep)[0], "buildmgr")],
            check=True,
        )
    for _ in range(runs):
        for checkout, data in (
            (before, os.environ.get("NOOP_DATA_BEFORE")),
            (after, os.environ.get("NOOP_DATA_AFTER")),
        ):
            env = dict(os.environ) | {"PYTHONPATH": checkout} | ({"XDG_DATA_HOME": data} if data else {})
            start = time.perf_counter()
            result = subprocess.run(
                [sys.executable, "-m", "buildmgr", "build", *build_args],
                env=env,
                cwd="/",  # `-m` puts the working directory first on sys.path: it must not hold a checkout
                capture_output=True,
                text=True,
                check=False,
            )
            times[checkout].append(time.perf_counter() - start)
            if "up to date" not in result.stderr:
                sys.exit(f"not a no-op in {checkout}: {result.stderr[-500:]}")
    for checkout, values in times.items():
        print(f"{checkout}: median {statistics.median(values):.3f} s, min {min(values):.3f} s over {runs}")
    print(f"after / before (medians): {statistics.median(times[after]) / statistics.median(times[before]):.2f}")


if __name__ == "__main__":
    main()
