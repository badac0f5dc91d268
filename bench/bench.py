"""Side-by-side timings on this machine, in one run: `python bench/bench.py` (about 20 minutes on 2 cores).

Measures the cold `buildmgr build cpu` against the plain commands of llama.cpp's docs/build.md,
a warm rebuild (fresh build dir, warm ccache), the no-op `buildmgr build`, and the device probe.
Prints a table and writes it as docs/benchmarks.md's top section (the dated sections below it stay).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from buildmgr.tools.cmake import find_cmake  # noqa: E402  (after the sys.path line above)

console = Console(stderr=True)


def timed(command: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    start = time.monotonic()
    result = subprocess.run(
        command, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False
    )
    elapsed = time.monotonic() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--archive", type=Path, help="an already downloaded llama-cpp-python sdist (else pip fetches it)"
    )
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="buildmgr-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "CCACHE_"))}
    env |= {
        "XDG_DATA_HOME": str(root / "data"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "CCACHE_DIR": str(root / "ccache"),
    }
    buildmgr = [sys.executable, "-m", "buildmgr"]
    jobs = str(os.cpu_count() or 1)
    rows: list[tuple[str, float, str]] = []

    console.print(f"[bold]bench root[/] {root}")
    sync = [*buildmgr, "source", "sync", *(["--archive", str(args.archive)] if args.archive else [])]
    rows.append(("fetch + verify + extract the pinned source", timed(sync, env, REPO), ""))
    source = next((root / "data" / "buildmgr" / "sources").glob("llama.cpp-*"))

    # llama.cpp's docs/build.md: `cmake -B build` then `cmake --build build --config Release` (-j as the docs suggest).
    cmake = str(find_cmake("3.18").path)
    plain_dir = root / "plain-build"
    # llama.cpp's GGML_CCACHE picks up an installed ccache by itself: give it an empty cache of its own,
    # so both builds are cold and the plain one leaves nothing for buildmgr's.
    plain_env = env | {"CCACHE_DIR": str(root / "plain-ccache")}
    console.print("plain docs build (every default target) …")
    plain = timed([cmake, "-S", str(source), "-B", str(plain_dir)], plain_env) + timed(
        [cmake, "--build", str(plain_dir), "--config", "Release", "-j", jobs], plain_env
    )
    rows.append(("docs' plain cmake build, all default targets, cold", plain, "baseline"))
    shutil.rmtree(plain_dir)

    console.print("cold buildmgr build cpu (empty ccache) …")
    cold = timed([*buildmgr, "build", "cpu", "--jobs", jobs], env, REPO)
    rows.append(
        (
            "buildmgr build cpu, cold ccache (build + install + smoke run)",
            cold,
            f"{plain / cold:.2f}× faster than plain",
        )
    )

    trees = root / "cache" / "buildmgr" / "build-trees"
    shutil.rmtree(trees)
    console.print("warm rebuild (fresh build dir, warm ccache) …")
    warm = timed([*buildmgr, "build", "cpu", "--rebuild", "--jobs", jobs], env, REPO)
    rows.append(
        ("buildmgr build cpu --rebuild, fresh build dir, warm ccache", warm, f"{cold / warm:.1f}× faster than cold")
    )

    noop_runs = [timed([*buildmgr, "build", "cpu"], env, REPO) for _ in range(5)]
    noop = statistics.median(noop_runs)
    rows.append(
        ("buildmgr build cpu when the prefix exists (no-op, median of 5)", noop, f"{cold / noop:.0f}× faster than cold")
    )

    prefix = Path(
        subprocess.run([*buildmgr, "which", "cpu"], env=env, capture_output=True, text=True, check=True).stdout.strip()
    )
    bare = statistics.median(timed([str(prefix / "bin" / "llama-bench"), "--list-devices"], env) for _ in range(5))
    rows.append(("llama-bench --list-devices alone (median of 5)", bare, "the probe's floor"))
    refresh = statistics.median(timed([*buildmgr, "devices", "--refresh"], env, REPO) for _ in range(5))
    rows.append(
        ("buildmgr devices --refresh, 1 build (median of 5)", refresh, f"{refresh - bare:+.2f} s over the floor")
    )
    stored = statistics.median(timed([*buildmgr, "devices"], env, REPO) for _ in range(5))
    rows.append(("buildmgr devices from the stored inventory (median of 5)", stored, ""))

    table = Table("what", "seconds", "ratio", title=f"buildmgr benchmarks, {date.today()}")
    for what, seconds, ratio in rows:
        table.add_row(what, f"{seconds:.2f}", ratio)
    Console().print(table)
    if not args.no_write:
        machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, -j{jobs}"
        lines = [
            "# Benchmarks",
            "",
            f"Measured {date.today()} by `python bench/bench.py` on one machine ({machine}), side by side in one run.",
            "Machines here are noisy: compare the ratios, not the absolute seconds.",
            "",
            "| what | seconds | ratio |",
            "| --- | ---: | --- |",
            *(f"| {what} | {seconds:.2f} | {ratio} |" for what, seconds, ratio in rows),
            "",
            "- The plain build is llama.cpp's docs/build.md: `cmake -B build` and `cmake --build build --config Release -j N`,",
            "  which builds every default target (all tools, tests, examples). llama.cpp uses an installed ccache by",
            "  itself (GGML_CCACHE); that build gets an empty cache of its own, so both builds are cold.",
            "- buildmgr builds only the recipe's targets (llama-server, llama-cli, llama-bench, llama-completion) with Ninja",
            "  and ccache, installs them into a staging prefix and smoke-runs them before publishing.",
            "- Warm rebuild: the build tree is deleted first, so CMake configures from scratch; ccache serves the compiles",
            "  from another build dir because buildmgr sets CCACHE_BASEDIR.",
            "- No-op: the identical prefix exists, so buildmgr reads its receipt and the remembered toolchain",
            "  (`<cache>/toolchain.json`, valid while cmake, ninja, the compilers and ccache are unchanged on disk)",
            "  and starts no program at all; the time is Python's start-up and imports.",
            "- Probe: `devices --refresh` runs each build's `--list-devices` and, where installed, nvidia-smi and",
            "  vulkaninfo; the floor is the tool's own start-up. On the H200 (docs/real-runs.md) a CUDA+Vulkan build's",
            "  refresh took 0.95-0.98 s, most of it CUDA and Vulkan initialisation.",
        ]
        target = REPO / "docs" / "benchmarks.md"  # this replaces the top section; the dated sections below stay
        old = target.read_text() if target.exists() else ""
        kept = old[old.index("\n## ") + 1 :] if "\n## " in old else ""
        target.write_text("\n".join(lines) + "\n" + ("\n" + kept if kept else ""))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
