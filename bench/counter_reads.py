"""The cards' energy counters as bench's sampler read them alone (tune by energy), from a samples file: per process,
reads a second, what each read's call took (files since 2026-12-06's evening), and the counter's update period from
the updates its reads timed, as bench's energy takes them (energy.timed_updates).

    python bench/counter_reads.py FILE.samples.jsonl.gz…
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from buildmgr.bench.energy import timed_updates


def main() -> None:
    for name in sys.argv[1:]:
        told = False
        with gzip.open(name, "rt") as f:
            for line in f:
                process = json.loads(line)
                reads = [c for s in process["samples"] for c in s.get("counters", [])]
                span = process["samples"][-1]["t"] - process["samples"][0]["t"] if process["samples"] else 0.0
                if not reads or span <= 0:
                    continue
                told = True
                for card in sorted({c[1] for c in reads}):
                    mine = sorted((c for c in reads if c[1] == card), key=lambda c: c[0])
                    took = [c[3] for c in mine if len(c) > 3]
                    updates = [at for at, _ in timed_updates([(c[0], c[2]) for c in mine])]
                    periods = [b - a for a, b in pairwise(updates)]
                    cost = (
                        f", a read {statistics.median(took):.2f} ms (max {max(took):.2f})"
                        if took
                        else ", no call times (a file from before they were kept)"
                    )
                    period = (
                        f", updates every {statistics.median(periods) * 1000:.0f} ms "
                        f"({min(periods) * 1000:.0f}-{max(periods) * 1000:.0f}, {len(updates)} timed)"
                        if periods
                        else ", no two updates timed"
                    )
                    print(
                        f"{process['config']} round {process['round']} {card}: {len(mine) / span:.0f} reads/s over "
                        f"{span:.1f} s{cost}{period}"
                    )
        if not told:
            print(f"{name}: no counter read alone (only tune by energy reads the counters alone)")


if __name__ == "__main__":
    main()
