"""NVML during a benchmark: each NVIDIA GPU's utilisation, memory, clock, power and slowdown reasons, the
processes on it, and a power limit below its default (nvidia-ml-py, the way NVIDIA recommends over parsing
nvidia-smi)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from buildmgr.core.engines import CardFacts, EngineReading, process_name

# nvml.h's clocks-event reasons that hold the clocks down under load (idle, application clocks, sync boost and the
# display clock are left out: they are not a slowdown of a busy GPU).
SLOWDOWNS = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
}


def nvml_reading(raw: Mapping[str, object]) -> EngineReading:
    """One GPU's raw NVML values (what `NvmlEngines.raw` reads; recorded readings replay through here) as a reading."""

    def number(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    used, power, reasons = number("memory_used_bytes"), number("power_mw"), raw.get("clocks_event_reasons")
    clock = number("sm_clock_mhz")
    return EngineReading(
        _pci(raw),
        number("gpu_util"),
        int(used) >> 20 if used is not None else None,
        int(clock) if clock is not None else None,
        power / 1000 if power is not None else None,
        tuple(name for bit, name in SLOWDOWNS.items() if isinstance(reasons, int) and reasons & bit),
        number("energy_mj"),
    )


def _pci(raw: Mapping[str, object]) -> str:
    from buildmgr.core.device_records import normalize_pci

    return normalize_pci(str(raw.get("bus_id", ""))) or str(raw.get("bus_id", "")).lower()


def card_facts(raw: Mapping[str, object]) -> CardFacts:
    """A card's model, driver and peak memory bandwidth: NVML's highest memory clock (MHz) × 2 transfers per clock ×
    the bus width (bits) / 8 (an H200: 3201 MHz × 2 × 6144 / 8 = 4.92 TB/s; NVIDIA states 4.8)."""
    clock, width = raw.get("max_memory_clock_mhz"), raw.get("memory_bus_width_bits")
    known = isinstance(clock, int) and isinstance(width, int) and clock > 0 and width > 0
    return CardFacts(
        _pci(raw),
        str(raw.get("name") or "NVIDIA GPU"),
        str(raw["driver"]) if raw.get("driver") else None,
        round(clock * 2 * width / 8 / 1000, 1) if known else None,  # type: ignore[operator]
        "NVML: max memory clock × 2 × bus width" if known else "NVML states no memory clock or bus width",
    )


def power_limit_note(raw: Mapping[str, object]) -> str | None:
    limit, default = raw.get("power_limit_mw"), raw.get("power_default_limit_mw")
    if isinstance(limit, int) and isinstance(default, int) and limit < default:
        return f"GPU {raw.get('bus_id')}: power limit {limit / 1000:.0f} W is below its default {default / 1000:.0f} W"
    return None


class NvmlEngines:
    """NVIDIA's management library (nvidia-ml-py), the way NVIDIA recommends over parsing nvidia-smi."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        # read once: what a sample does not need again costs the CPU a benchmark may be using (issue #48)
        self.bus_ids = [self._bus(h) for h in self.handles]
        self.pcis = [_pci({"bus_id": bus}) for bus in self.bus_ids]
        self.uncounted: set[str] = set()

    @classmethod
    def open(cls) -> NvmlEngines | None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:  # no driver or no libnvidia-ml here
            return None
        return cls(pynvml)

    def _try(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except self.nvml.NVMLError:
            return None

    def _bus(self, handle: Any) -> str:
        pci = self._try(self.nvml.nvmlDeviceGetPciInfo, handle)
        bus = getattr(pci, "busId", b"") if pci is not None else b""
        return bus.decode() if isinstance(bus, bytes) else str(bus)

    def raw(self, index: int) -> dict[str, object]:
        """One sample of GPU `index`: only what changes while it runs."""
        nvml, handle = self.nvml, self.handles[index]
        util = self._try(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = self._try(nvml.nvmlDeviceGetMemoryInfo, handle)
        # renamed from "throttle" to "clocks event" reasons in NVML 12.x; older bindings have only the old name
        reasons_call = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        return {
            "bus_id": self.bus_ids[index],
            "gpu_util": util.gpu if util is not None else None,
            "memory_used_bytes": memory.used if memory is not None else None,
            "sm_clock_mhz": self._try(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            "power_mw": self._try(nvml.nvmlDeviceGetPowerUsage, handle),
            "clocks_event_reasons": self._try(reasons_call, handle),
            "energy_mj": self._try(nvml.nvmlDeviceGetTotalEnergyConsumption, handle),
        }

    def facts(self, handle: Any) -> dict[str, object]:
        """What does not change while the host runs: name, driver, the memory's highest clock and bus width."""
        nvml = self.nvml
        name, driver = self._try(nvml.nvmlDeviceGetName, handle), self._try(nvml.nvmlSystemGetDriverVersion)
        return {
            "bus_id": self._bus(handle),
            "name": name.decode() if isinstance(name, bytes) else name,
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "max_memory_clock_mhz": self._try(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM),
            "memory_bus_width_bits": self._try(nvml.nvmlDeviceGetMemoryBusWidth, handle),
        }

    def read(self) -> list[EngineReading]:
        return [nvml_reading(self.raw(i)) for i in range(len(self.handles))]

    def counters(self, cards: Collection[str]) -> list[tuple[str, float]]:
        found = []
        for pci, handle in zip(self.pcis, self.handles, strict=True):
            if pci in cards and pci not in self.uncounted:
                energy = self._try(self.nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
                if isinstance(energy, (int, float)):
                    found.append((pci, float(energy)))
                else:  # a card without the counter (before Volta): not asked again, several times a step
                    self.uncounted.add(pci)
        return found

    def users(self) -> list[tuple[int, str]]:
        found: dict[int, str] = {}
        for handle in self.handles:
            for call in (
                self.nvml.nvmlDeviceGetComputeRunningProcesses,
                self.nvml.nvmlDeviceGetGraphicsRunningProcesses,
            ):
                for process in self._try(call, handle) or []:
                    found[process.pid] = process_name(process.pid)
        return sorted(found.items())

    def limits(self) -> list[str]:
        found = []
        for bus, handle in zip(self.bus_ids, self.handles, strict=True):
            raw = {
                "bus_id": bus,
                "power_limit_mw": self._try(self.nvml.nvmlDeviceGetPowerManagementLimit, handle),
                "power_default_limit_mw": self._try(self.nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle),
            }
            if note := power_limit_note(raw):
                found.append(note)
        return found

    def cards(self) -> list[CardFacts]:
        return [card_facts(self.facts(h)) for h in self.handles]

    def close(self) -> None:
        self._try(self.nvml.nvmlShutdown)
