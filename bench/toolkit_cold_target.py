"""A whole target built cold in two build dirs at the same time: `python bench/toolkit_cold_target.py A_BUILD_DIR
B_BUILD_DIR [--json OUT] [TARGET…]` (default: ggml-cuda). The build dirs come from `buildmgr build cuda --sm 75
--configure-only` with two CUDA toolkits (bench/toolkit-side-by-side.sh). Each tree is cleaned, then both build the
target at once, one job each, ccache off, so both see the same machine for the whole run (one core each on a 2-core
machine). Reported: each tree's wall time, and every object's compile time from ninja's log, paired by name, with the
median, quartiles and extremes of the per-object ratios B/A."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def ninja() -> str:
    return shutil.which("ninja", path=str(Path(sys.executable).parent)) or "ninja"


def clean(build_dir: Path) -> None:
    subprocess.run([ninja(), "-C", str(build_dir), "-t", "clean"], check=True, capture_output=True)
    (build_dir / ".ninja_log").unlink(missing_ok=True)  # a fresh log holds this run's times only


def durations(build_dir: Path) -> dict[str, float]:
    """Seconds per output, from .ninja_log (tab-separated: start ms, end ms, mtime, output, hash)."""
    times = {}
    for line in (build_dir / ".ninja_log").read_text().splitlines():
        if line.startswith("#"):
            continue
        start, end, _, output, *_ = line.split("\t")
        times[output] = (int(end) - int(start)) / 1000
    return times


def quantiles(values: list[float]) -> dict[str, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return {"min": min(values), "q1": q1, "median": q2, "q3": q3, "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("targets", nargs="*", default=["ggml-cuda"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_intermixed_args()
    for tree in (args.a, args.b):
        clean(tree)
    env = dict(os.environ, CCACHE_DISABLE="1")
    start = time.perf_counter()
    running = {
        which: subprocess.Popen(
            [ninja(), "-C", str(tree), "-j", "1", *args.targets],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for which, tree in (("a", args.a), ("b", args.b))
    }
    wall = {}
    while len(wall) < len(running):
        for which, process in running.items():
            if which not in wall and process.poll() is not None:
                if process.returncode:
                    sys.exit(f"{which}: ninja failed: {process.stderr.read().decode()[-2000:]}")
                wall[which] = time.perf_counter() - start
        time.sleep(1)
    a, b = durations(args.a), durations(args.b)
    paired = sorted(set(a) & set(b))
    cuda_objects = [name for name in paired if name.endswith(".cu.o")]
    ratios = [b[name] / a[name] for name in cuda_objects if a[name] > 0]
    result = {
        "targets": args.targets,
        "wall_a_s": round(wall["a"], 1),
        "wall_b_s": round(wall["b"], 1),
        "wall_ratio_b_over_a": round(wall["b"] / wall["a"], 3),
        "cuda_objects": len(cuda_objects),
        "cuda_seconds_a": round(sum(a[n] for n in cuda_objects), 1),
        "cuda_seconds_b": round(sum(b[n] for n in cuda_objects), 1),
        "ratio_quantiles": {k: round(v, 3) for k, v in quantiles(ratios).items()},
        "only_a": sorted(set(a) - set(b)),
        "only_b": sorted(set(b) - set(a)),
        "samples": {name: [a[name], b[name]] for name in paired},
    }
    print(
        f"{' '.join(args.targets)}: A {wall['a']:.1f} s, B {wall['b']:.1f} s wall (B/A {wall['b'] / wall['a']:.3f}); "
        f"{len(cuda_objects)} .cu objects: A {result['cuda_seconds_a']} s, B {result['cuda_seconds_b']} s; "
        f"per-object B/A {result['ratio_quantiles']}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
