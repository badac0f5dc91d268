"""amdgpu's sysfs during a benchmark: what rocm-smi reads, without it: each AMD card's busy percent, VRAM used,
shader clock and power, the processes with GPU queues, and a power cap below its default."""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from buildmgr.backends.hip import AMD_VENDOR
from buildmgr.core.engines import CardFacts, EngineReading, process_name, read_file


def _int(path: Path) -> int | None:
    text = read_file(path)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _hwmon(device: Path, name: str) -> int | None:
    return next((v for h in sorted(device.glob("hwmon/hwmon*")) if (v := _int(h / name)) is not None), None)


def amd_reading(device: Path) -> EngineReading | None:
    """One card's `/sys/class/drm/cardN/device`: gpu_busy_percent, mem_info_vram_used (bytes), the current sclk
    (the `*` line of pp_dpm_sclk) and hwmon's power1_average (µW; power1_input on newer kernels)."""
    if read_file(device / "vendor") != AMD_VENDOR:
        return None
    clock = re.search(r"(\d+)\s*mhz\s*\*", (read_file(device / "pp_dpm_sclk") or "").lower())
    used = _int(device / "mem_info_vram_used")
    power = _hwmon(device, "power1_average") or _hwmon(device, "power1_input")
    busy = _int(device / "gpu_busy_percent")
    energy = _hwmon(device, "energy1_input")  # µJ, where the kernel has it
    return EngineReading(
        _pci(device),
        float(busy) if busy is not None else None,
        used >> 20 if used is not None else None,
        int(clock.group(1)) if clock else None,
        power / 1e6 if power is not None else None,
        (),
        energy / 1000 if energy is not None else None,
    )


def _pci(device: Path) -> str:
    from buildmgr.core.device_records import normalize_pci

    uevent = dict(line.split("=", 1) for line in (read_file(device / "uevent") or "").splitlines() if "=" in line)
    return normalize_pci(uevent.get("PCI_SLOT_NAME")) or uevent.get("PCI_SLOT_NAME", "")


class SysfsEngines:
    """amdgpu's own files: what rocm-smi reads, without it."""

    def __init__(self, sys_root: Path = Path("/sys")) -> None:
        self.root = sys_root
        cards = sorted(c for c in (sys_root / "class" / "drm").glob("card*") if re.fullmatch(r"card\d+", c.name))
        self.devices = [c / "device" for c in cards if read_file(c / "device" / "vendor") == AMD_VENDOR]
        # found once: the counters are read around their updates, several times a step
        self.energy_files = {
            _pci(d): files[0] for d in self.devices if (files := sorted(d.glob("hwmon/hwmon*/energy1_input")))
        }

    @classmethod
    def open(cls, sys_root: Path = Path("/sys")) -> SysfsEngines | None:
        found = cls(sys_root)
        return found if found.devices else None

    def read(self) -> list[EngineReading]:
        return [r for d in self.devices if (r := amd_reading(d)) is not None]

    def counters(self, cards: Collection[str]) -> list[tuple[str, float]]:
        found = [(pci, _int(file)) for pci, file in self.energy_files.items() if pci in cards]
        return [(pci, energy / 1000) for pci, energy in found if energy is not None]  # µJ

    def users(self) -> list[tuple[int, str]]:
        """amdkfd lists every process with GPU queues under /sys/class/kfd/kfd/proc/PID."""
        procs = self.root / "class" / "kfd" / "kfd" / "proc"
        pids = sorted(int(p.name) for p in procs.iterdir() if p.name.isdigit()) if procs.is_dir() else []
        return [(pid, process_name(pid)) for pid in pids]

    def limits(self) -> list[str]:
        notes = []
        for device in self.devices:
            cap, default = _hwmon(device, "power1_cap"), _hwmon(device, "power1_cap_default")
            if cap is not None and default is not None and cap < default:
                notes.append(
                    f"GPU {device.resolve().name}: power cap {cap / 1e6:.0f} W is below its default {default / 1e6:.0f} W"
                )
        return notes

    def cards(self) -> list[CardFacts]:
        """amdgpu's sysfs names the card's PCI id and its VRAM vendor, but states no memory bus width: no peak."""
        return [
            CardFacts(
                _pci(d),
                (read_file(d / "product_name") or "AMD GPU").strip(),
                (read_file(self.root / "module" / "amdgpu" / "version") or "").strip() or None,
                None,
                "amdgpu's sysfs states no memory bus width",
            )
            for d in self.devices
        ]

    def close(self) -> None:
        pass
