"""A vendor's live view of its cards for `bench` and `tune` (engine readings, card facts), as records the backends'
`engines` modules fill in and the sampler reads; and the small /proc and sysfs reads they share."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple, Protocol


class EngineReading(NamedTuple):
    """One card's engines at one instant, as its vendor's library or the kernel reports them (None: not reported)."""

    pci_bus_id: str  # devices.normalize_pci spelling: how a reading is matched to a device of a build
    busy_percent: float | None  # share of the last sampling period the GPU ran a kernel
    memory_used_mib: int | None
    clock_mhz: int | None  # the graphics/SM clock
    power_w: float | None
    slowdowns: tuple[str, ...] = ()  # active reasons the clocks are held down (power cap, thermal …)
    energy_mj: float | None = None  # a counter that only grows (NVML's total energy, amdgpu's hwmon energy)


class CardFacts(NamedTuple):
    """A card as its vendor's library states it: what a row's host records, and its peak memory bandwidth (the
    decode limit's denominator; None with the reason where the library does not state it)."""

    pci_bus_id: str
    model: str
    driver: str | None
    peak_gbs: float | None
    peak_basis: str


class EngineSource(Protocol):
    """A vendor's live view of its cards, opened for one benchmark: read often, closed once."""

    def read(self) -> list[EngineReading]: ...

    def counters(self, cards: Collection[str]) -> list[tuple[str, float]]:
        """The energy counter alone of each of these cards (PCI ids) it has, (PCI id, mJ), where it has one: one call
        a card, read around the counter's updates under tune's energy objective (a counter that moves in steps is
        timed by when it moves; an NVML read costs an H100's host about 3 ms of CPU)."""
        ...

    def users(self) -> list[tuple[int, str]]:
        """Processes holding its GPUs (pid, what they run; the name may be unknown inside a container)."""
        ...

    def limits(self) -> list[str]:
        """Sentences on what caps the cards' speed before any run (a power limit below the card's default …)."""
        ...

    def cards(self) -> list[CardFacts]: ...

    def close(self) -> None: ...


def process_name(pid: int, proc: str = "/proc") -> str:
    """What a process runs (/proc/PID/comm); a process of another PID namespace (a container's host) is not visible."""
    try:
        with open(f"{proc}/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "not visible here"


def read_file(path: Path) -> str | None:
    """A small file's text (sysfs, a CMake package's version file), stripped; None where it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None
