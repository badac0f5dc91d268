"""This host, read once (its memory free, read when asked): the receipt, the backends' checks, the artifact checks and the inventory all describe it
from here. The cheap facts come from uname; the costly ones (platform's OS string, /proc/cpuinfo) only when asked,
so a no-op never pays for them."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostFacts:
    hostname: str
    system: str  # uname's, e.g. Linux, Darwin
    machine: str  # uname's, e.g. x86_64, aarch64
    cpus: int | None

    @functools.cached_property
    def os(self) -> str:
        import platform  # its import and platform() cost a no-op 50 ms

        return platform.platform()

    @functools.cached_property
    def _cpuinfo(self) -> list[str]:
        try:
            return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return []

    @functools.cached_property
    def cpu_flags(self) -> frozenset[str]:
        """The first CPU's feature flags (x86's `flags`, ARM's `Features`)."""
        line = next((ln for ln in self._cpuinfo if ln.startswith(("flags", "Features"))), "")
        return frozenset(line.partition(":")[2].split())

    @functools.cached_property
    def cpu(self) -> str:
        lines = self._cpuinfo
        named = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
        if named:
            return named
        import platform  # e.g. arm64, whose cpuinfo names no model

        return platform.processor()

    @functools.cached_property
    def ram_mib(self) -> int | None:
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
        except (ValueError, OSError):
            return None

    def receipt_json(self) -> dict[str, object]:
        """Where a build was made (the receipt's `host`)."""
        return {
            "hostname": self.hostname,
            "system": self.system,
            "os": self.os,
            "machine": self.machine,
            "cpus": self.cpus,
        }

    def inventory_json(self) -> dict[str, object]:
        """The machine the inventory describes (its `host`, before the drivers and GPUs)."""
        return {"hostname": self.hostname, "os": self.os, "cpu": self.cpu, "cpus": self.cpus, "ram_mib": self.ram_mib}


MEMINFO = Path("/proc/meminfo")


def meminfo_kib(name: str, path: Path = MEMINFO) -> int | None:
    """A field of /proc/meminfo in KiB (`MemTotal`, `MemAvailable`), read now; None where the file or the field is not
    there (no /proc on macOS; MemAvailable came with Linux 3.14)."""
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        field, _, rest = line.partition(":")
        if field == name:
            value = rest.split()[:1]
            return int(value[0]) if value and value[0].isdigit() else None
    return None


def available_mib(path: Path = MEMINFO) -> int | None:
    """The memory the kernel says new work may take without swapping, now; None where it does not say."""
    kib = meminfo_kib("MemAvailable", path)
    return None if kib is None else kib // 1024


@functools.cache
def read() -> HostFacts:
    uname = os.uname()
    return HostFacts(uname.nodename, uname.sysname, uname.machine, os.cpu_count())


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask or cpuset; all of them where the OS has none to tell)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
