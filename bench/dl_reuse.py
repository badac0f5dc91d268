"""How much of a second build ccache served from the first: `dl_reuse.py FIRST.ninja_log SECOND.ninja_log
SECOND.ccache.log`. The compilations the two builds share are the object files of one path in both .ninja_logs;
ccache's log (CCACHE_LOGFILE) of the second build says which of them were hits. Prints the share and the misses."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

LINE = re.compile(r"^\[\S+ (\d+)\s*\] (Object file|Result): (.+)$")


def objects(ninja_log: Path) -> set[str]:
    lines = ninja_log.read_text().splitlines()[1:]
    return {fields[3] for fields in (line.split("\t") for line in lines) if fields[3].endswith(".o")}


def results(ccache_log: Path) -> dict[str, str]:
    """Each object file's last result (a hit, a miss, or why ccache could not cache it)."""
    current: dict[str, str] = {}
    outcome: dict[str, str] = {}
    for line in ccache_log.read_text(errors="replace").splitlines():
        match = LINE.match(line)
        if not match:
            continue
        pid, kind, value = match.groups()
        if kind == "Object file":
            current[pid] = value
        elif pid in current:
            outcome[current.pop(pid)] = value
    return outcome


def main() -> None:
    first, second, log = map(Path, sys.argv[1:4])
    shared = objects(first) & objects(second)
    outcome = results(log)
    counts = Counter(outcome.get(name, "not in ccache's log") for name in shared)
    hits = sum(n for result, n in counts.items() if result.endswith("_hit"))
    print(f"shared compilations: {len(shared)}; served from the cache: {hits} ({hits / max(len(shared), 1):.1%})")
    print(f"second build: {len(objects(second))} objects, {len(outcome)} seen by ccache")
    for result, n in counts.most_common():
        print(f"  {result}: {n}")
    for name in sorted(n for n in shared if not outcome.get(n, "").endswith("_hit"))[:40]:
        print(f"  not served: {name} ({outcome.get(name, 'not in ccache log')})")


if __name__ == "__main__":
    main()
