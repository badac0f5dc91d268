"""Cold compiles of ggml-cuda objects with two CUDA toolkits, side by side in one run: `python bench/toolkit_side_by_side.py
A_BUILD_DIR B_BUILD_DIR [--rounds N] [--json OUT] TARGET…`. Each build dir comes from `buildmgr build cuda --sm 75
--configure-only` with one toolkit (A: `toolchain add cuda`, B: the system's). Every round compiles each target once
in each tree, ccache off, the order alternating (A B, then B A), one compile at a time; every sample is kept and
each target's ratio B/A is its median over rounds, with the spread (min–max of the per-round ratios). One warm-up
compile per tree first, not timed."""

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


def compile_once(build_dir: Path, target: str) -> float:
    (build_dir / target).unlink(missing_ok=True)
    ninja = shutil.which("ninja", path=str(Path(sys.executable).parent)) or "ninja"
    env = dict(os.environ, CCACHE_DISABLE="1")
    start = time.perf_counter()
    subprocess.run([ninja, "-C", str(build_dir), target], check=True, env=env, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("targets", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    samples: dict[str, dict[str, list[float]]] = {t: {"a": [], "b": []} for t in args.targets}
    compile_once(args.a, args.targets[0])  # warm-up, not timed: each toolkit's files into the page cache
    compile_once(args.b, args.targets[0])
    for round_ in range(args.rounds):
        for target in args.targets:
            order = ("a", "b") if round_ % 2 == 0 else ("b", "a")
            for which in order:
                samples[target][which].append(compile_once(getattr(args, which), target))
    rows = []
    for target, by in samples.items():
        ratios = [b / a for a, b in zip(by["a"], by["b"], strict=False)]
        rows.append(
            {
                "target": target,
                "a_median_s": round(statistics.median(by["a"]), 2),
                "b_median_s": round(statistics.median(by["b"]), 2),
                "ratio_b_over_a": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
                "samples": by,
            }
        )
    total_a = sum(statistics.median(s["a"]) for s in samples.values())
    total_b = sum(statistics.median(s["b"]) for s in samples.values())
    result = {
        "rows": rows,
        "total_a_s": round(total_a, 1),
        "total_b_s": round(total_b, 1),
        "ratio": round(total_b / total_a, 3),
    }
    for row in rows:
        print(f"{row['target']:70} A {row['a_median_s']:7.2f} s  B {row['b_median_s']:7.2f} s  B/A {row['ratio_b_over_a']:.3f} "
              f"({row['ratio_min']:.3f}–{row['ratio_max']:.3f})")  # fmt: skip
    print(f"sum of medians: A {total_a:.1f} s, B {total_b:.1f} s, B/A {total_b / total_a:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
