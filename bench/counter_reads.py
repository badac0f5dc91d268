"""The cards' energy counters as bench's sampler read them alone (tune by energy), from a samples file: per process,
reads a second, what each read's call took (files since 2026-12-06's evening), and the counter's update period where
two reads at most sampling.BRACKET apart saw it move (timed at their midpoint, as limit does).

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

from buildmgr.bench.sampling import BRACKET


def main() -> None:
    for name in sys.argv[1:]:
        with gzip.open(name, "rt") as f:
            for line in f:
                process = json.loads(line)
                reads = [c for s in process["samples"] for c in s.get("counters", [])]
                span = process["samples"][-1]["t"] - process["samples"][0]["t"] if process["samples"] else 0.0
                if not reads or span <= 0:
                    continue
                for card in sorted({c[1] for c in reads}):
                    mine = sorted((c for c in reads if c[1] == card), key=lambda c: c[0])
                    took = [c[3] for c in mine if len(c) > 3]
                    updates = [(a[0] + b[0]) / 2 for a, b in pairwise(mine) if b[2] != a[2] and b[0] - a[0] <= BRACKET]
                    periods = [b - a for a, b in pairwise(updates)]
                    cost = f", a read {statistics.median(took):.2f} ms (max {max(took):.2f})" if took else ""
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


if __name__ == "__main__":
    main()
