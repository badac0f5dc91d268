"""Each device's peak memory bandwidth, the decode limit's other side, and where it comes from: a card's from its
vendor's library (the backends read it), the CPU's measured here once (every core summing its own slice of an array
far larger than the caches, best of a few passes) and kept per host in `<cache>/bench-host.json`. No library or file
states a CPU's bandwidth reliably, so it is measured rather than looked up."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from buildmgr.bench.judge import Placed
from buildmgr.bench.limit import CPU
from buildmgr.bench.rows import HostRow
from buildmgr.core import hostfacts
from buildmgr.core.fsutil import atomic_write_text, locked
from buildmgr.core.hostfacts import usable_cpus

ARRAY_MIB = 1024  # far beyond any last-level cache: the sum reads memory
PASSES = 3
FILE = "bench-host.json"


class Bandwidth(NamedTuple):
    gbs: float | None
    basis: str  # how it was found, or why it is unknown


def _host_key(hostname: str, cpu: str) -> str:
    total = hostfacts.meminfo_kib("MemTotal")
    return f"{hostname}|{cpu}|{'?' if total is None else total}"


def measure() -> Bandwidth:
    """Every usable core reads its own slice of ARRAY_MIB with numpy (which releases the GIL in the sum), a slice
    that core's thread wrote first, so that on a NUMA host its pages are its own node's (a STREAM-like read); the
    fastest of PASSES passes."""
    try:
        import numpy as np  # gguf's dependency, so always here with buildmgr
    except ImportError:
        return Bandwidth(None, "numpy is not importable, so the CPU's bandwidth was not measured")
    cores = usable_cpus()
    parts: list[np.ndarray[Any, Any]] = [np.empty(0)] * cores

    def touch(index: int) -> None:
        parts[index] = np.ones((ARRAY_MIB << 17) // cores, dtype=np.float64)  # 8 bytes each

    def each(target: Callable[[int], object]) -> float:
        threads = [threading.Thread(target=target, args=(i,)) for i in range(cores)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.perf_counter() - start

    each(touch)
    total = sum(part.nbytes for part in parts)
    best = max(total / each(lambda i: np.add.reduce(parts[i])) / 1e9 for _ in range(PASSES))
    return Bandwidth(
        round(best, 1),
        f"measured here: {cores} threads each summing its own first-touched slice of {ARRAY_MIB} MiB, best of {PASSES}",
    )


def cpu_bandwidth(cache: Path, hostname: str, cpu: str, *, busy: bool = False, again: bool = False) -> Bandwidth:
    """The kept measurement of this host, else a new one (about a second), kept; `again`: a new one whatever is
    kept. One taken while the host is `busy` reads low: it is said so and not kept."""
    path = cache / FILE
    key = _host_key(hostname, cpu)
    with locked(cache / f"{FILE}.lock"):
        try:
            kept = json.loads(path.read_text())
        except (OSError, ValueError):
            kept = {}
        found = kept.get(key) if isinstance(kept, dict) else None
        if not again and isinstance(found, dict) and isinstance(found.get("gbs"), (int, float)):
            return Bandwidth(float(found["gbs"]), str(found.get("basis", "measured here")))
        made = measure()
        if busy and made.gbs is not None:
            return Bandwidth(made.gbs, made.basis + ", while the host was busy with other work: low, and not kept")
        if made.gbs is not None:
            kept = kept if isinstance(kept, dict) else {}
            kept[key] = {"gbs": made.gbs, "basis": made.basis, "at": time.strftime("%Y-%m-%d")}
            atomic_write_text(path, json.dumps(kept, indent=2, sort_keys=True) + "\n")
        return made


def per_device(roles: Sequence[Placed], host: HostRow) -> dict[str, tuple[float | None, str]]:
    """Each device's peak memory bandwidth and where it comes from: a card's from its vendor's library, a CPU-side
    device's (the CPU, lavapipe) and the CPU's own buffers from the host's measurement."""
    cards = {c.pci_bus_id: c for c in host.cards}
    found: dict[str, tuple[float | None, str]] = {CPU: (host.cpu_gbs, host.cpu_basis)}
    for role in roles:
        card = cards.get(role.pci_bus_id or "")
        if role.on_cpu:
            found[role.name] = (host.cpu_gbs, host.cpu_basis)
        elif card is not None:
            found[role.name] = (card.peak_gbs, card.peak_basis)
        else:
            found[role.name] = (None, "no vendor library reports this card")
    return found
