"""bench's sampler's own CPU, side by side: no counter read alone (bench, tune by speed), the counter read every
10 ms (tune by energy before 2026-12-06, later), and read around its updates (sampling.CounterClock). The source
answers at once except for each counter read, which spins the CPU for COST ms as an H100's NVML energy call did
(about 3 ms: bench's own CPU 4.9 % → 32 % of a core at 100 reads a second, docs/real-runs.md); its counter moves
every 0.1 s. Modes interleaved, ROUNDS rounds of SECONDS each; prints each mode's CPU share and reads a second.

    python bench/sampler_cost.py [SECONDS] [ROUNDS] [COST_MS]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Collection

from buildmgr.bench import sampling
from buildmgr.bench.sampling import COUNTER_INTERVAL, CounterClock, Sampler

CARD = "0000:00:06.0"


class Source:
    def __init__(self, cost_s: float) -> None:
        self.cost_s, self.reads = cost_s, 0

    def read(self) -> list[object]:
        return []

    def counters(self, cards: Collection[str]) -> list[tuple[str, float]]:
        self.reads += 1
        end = time.process_time() + self.cost_s
        while time.process_time() < end:
            pass
        return [(CARD, 45_000.0 * (time.monotonic() // 0.1))]


def every_10_ms(self: CounterClock) -> float:
    return self.last[0] + COUNTER_INTERVAL if self.last else 0.0


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cost = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0027
    scheduled = CounterClock.next_at
    found: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for mode in ("samples only", "every 10 ms", "around updates"):
            CounterClock.next_at = every_10_ms if mode == "every 10 ms" else scheduled  # type: ignore[method-assign]
            source = Source(cost)
            counted = frozenset() if mode == "samples only" else frozenset({CARD})
            cpu = time.process_time()
            with Sampler([source], 0.1, counted=counted):  # type: ignore[list-item]
                time.sleep(seconds)
            found.setdefault(mode, []).append(((time.process_time() - cpu) / seconds, source.reads / seconds))
    CounterClock.next_at = scheduled  # type: ignore[method-assign]
    print(
        f"{rounds} rounds of {seconds:.0f} s, each counter read {cost * 1000:.1f} ms of CPU (sampling {sampling.__file__})"
    )
    for mode, runs in found.items():
        shares = [s * 100 for s, _ in runs]
        print(
            f"{mode:15} CPU {statistics.median(shares):5.2f} % of a core (min {min(shares):.2f}, max {max(shares):.2f})"
            f", counter reads {statistics.median(r for _, r in runs):.0f}/s"
        )


if __name__ == "__main__":
    main()
