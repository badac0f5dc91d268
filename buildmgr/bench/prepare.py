"""Before anything runs: the command line's CONFIGs read and resolved, each checked against its build's devices here
(`Planned`: its roles, PCI ids, environment and findings, and what its model's tensors weigh), the host as rows
record it, and whether something else keeps the host busy."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.bench import bandwidth, limit, rows
from buildmgr.bench.config import Asked, BenchConfig, BenchRequest, parse_config, read_toml, resolve
from buildmgr.bench.judge import BUSY_PERCENT, HOST, Placed
from buildmgr.bench.sampling import cpu_times, services
from buildmgr.core import hostfacts
from buildmgr.core.device_records import Device
from buildmgr.core.device_records import Role as DeviceRole
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Finding, errors
from buildmgr.devices import identity
from buildmgr.fleet import endpoints
from buildmgr.placement.check import check, memory_findings, model_devices, read_gguf, weights_per_device

if TYPE_CHECKING:
    from buildmgr.core.config import Dirs
    from buildmgr.store import Build
BUSY_READINGS = 5  # engine readings taken before the first run to see whether another process keeps a GPU busy
# Over that window, other work on this share of all CPUs makes the host busy: on 2 cores one busy process (pyperf
# checks the system load before it trusts a number, for the same reason).
CPU_WINDOW_S = 0.5
CPU_BUSY_PERCENT = 40.0


@dataclass(frozen=True)
class Planned:
    """A CONFIG resolved on this host: its build, the devices the model gets (with their PCI ids), how each is
    judged, the environment its runs get, and what the placement check said."""

    config: BenchConfig
    build: Build
    model: Path
    roles: tuple[Placed, ...]
    devices: dict[str, str | None]
    env_set: dict[str, str]
    findings: tuple[Finding, ...]
    guard: dict[str, str] = field(default_factory=dict)  # what would keep its backends from pinning host memory
    model_bytes: limit.ModelBytes | None = None  # each tensor's bytes, the vocabulary, the share of experts used

    @property
    def blocked(self) -> Finding | None:
        """The placement check's certain failure: the CONFIG is reported, not run."""
        return next(iter(errors(list(self.findings))), None)


# --- before anything runs ----------------------------------------------------------------------------------------


def prepare(asked: Asked, before_models: Callable[[], None] = lambda: None) -> tuple[BenchRequest, list[str]]:
    """The command line's CONFIGs and those of its file, and the models' contexts, read; then resolved (config)."""
    configs = [parse_config(text) for text in asked.configs]
    if asked.config_file is not None:
        configs += read_toml(asked.config_file)
    return resolve(asked, configs, model_context, before_models)


def model_context(model: Path) -> int | None:
    """The model's trained context from its GGUF header (no weights read); UserError if it is not a GGUF."""
    if model.is_dir():
        raise UserError(f"model {model} is a directory: name the GGUF file")
    if not model.is_file():
        raise UserError(f"model {model} does not exist")
    reader = read_gguf(model)
    arch = reader.fields.get("general.architecture")
    key = f"{bytes(arch.parts[-1]).decode()}.context_length" if arch is not None else None
    value = reader.fields.get(key) if key else None
    return int(value.parts[-1][0]) if value is not None else None


def plan(dirs: Dirs, request: BenchRequest, environ: Mapping[str, str]) -> list[Planned]:
    """Each CONFIG against its build's devices here, with the model; a name that is no device here is exit 2."""
    from buildmgr import store
    from buildmgr.placement.run import here_for

    planned = []
    for config in request.configs:
        build = store.find(dirs, config.build)
        build.installed_tool("llama-bench")
        servers = config.placement.servers
        if servers:
            endpoints.ready_for(build, servers, request.network_timeout, f"CONFIG {config.label!r}: --rpc")
        here, _ = here_for(dirs, build, environ, servers)
        found = check(config.placement, here)
        unknown = [f for f in found if f.rule == "invalid-device"]
        if unknown:
            raise UserError(f"CONFIG {config.label!r}: {unknown[0].message}; {unknown[0].fix}")
        chosen, _ = model_devices(config.placement, here)
        model = config.model(request.model)
        found += memory_findings(weights_per_device(config.placement, model, here, chosen), here)
        by_name = {d.name: d for d in here.devices}
        # With no device the CPU runs it, judged by the process's CPU time; with -ngl 0 the devices stay the
        # roles, so that their idle decode shows as the fallback it is.
        roles = roles_for(chosen, by_name, config.cpu_overrides)
        guard = backends.pinning_guards([by_name[n].backend for n in chosen])
        env_set = guard if config.cpu_overrides and not request.allow_pinned else {}
        devices = {n: identity.card_pci(by_name[n]) for n in chosen}
        read = model_bytes(model)
        planned.append(Planned(config, build, model, tuple(roles), devices, env_set, tuple(found), guard, read))
    return planned


def roles_for(chosen: Sequence[str], by_name: Mapping[str, Device], cpu_overrides: bool) -> list[Placed]:
    """The devices a CONFIG runs on, as the judge reads them: each by its card's PCI id (a virtual device's engines
    are its card's), the host's CPU where none is chosen."""
    return [
        Placed(n, identity.card_pci(by_name[n]), by_name[n].type == DeviceRole.CPU, cpu_overrides) for n in chosen
    ] or [Placed(HOST, None, True)]


def model_bytes(model: Path) -> limit.ModelBytes:
    """From the GGUF header: each tensor's bytes and rows (a lookup table's token reads one), and the share of its
    experts a token uses (`ARCH.expert_used_count` over `ARCH.expert_count`)."""
    reader = read_gguf(model)
    tensors = tuple((t.name, int(t.n_bytes), int(t.shape[-1]) if len(t.shape) else 1) for t in reader.tensors)
    arch = reader.fields.get("general.architecture")
    name = bytes(arch.parts[-1]).decode() if arch is not None else ""

    def number(key: str) -> int | None:
        found = reader.fields.get(f"{name}.{key}")
        return int(found.parts[-1][0]) if found is not None else None

    used, experts = number("expert_used_count"), number("expert_count")
    return limit.ModelBytes(tensors, used / experts if used and experts else 1.0)


def host_record(
    dirs: Dirs, sources: Sequence[backends.EngineSource], *, busy: bool = False, again: bool = False
) -> rows.HostRow:
    """This machine as rows record it: name, CPU, every card the vendors' libraries see, the CPU's bandwidth."""
    facts = hostfacts.read()
    cards = tuple(
        rows.CardRow(c.model, c.pci_bus_id, c.driver, c.peak_gbs, c.peak_basis) for s in sources for c in s.cards()
    )
    measured = bandwidth.cpu_bandwidth(dirs.cache, facts.hostname, facts.cpu, busy=busy, again=again)
    return rows.HostRow(facts.hostname, facts.cpu, cards, measured.gbs, measured.basis)


def busy_host(sources: Sequence[backends.EngineSource], interval: float) -> list[str]:
    """Other processes on the GPUs, model servers running, GPUs kept busy by something, and CPUs busy with other
    work (which decides every CPU-side figure): each a sentence."""
    own = os.getpid()
    found = [f"{name} (pid {pid}) is using a GPU" for s in sources for pid, name in s.users() if pid != own]
    found += [f"{name} (pid {pid}) is running" for pid, name in services(skip=[own])]
    readings: dict[str, list[float]] = {}
    before = cpu_times()
    for _ in range(BUSY_READINGS):  # this process sleeps meanwhile: what the CPUs do is other work
        for source in sources:
            for reading in source.read():
                if reading.busy_percent is not None:
                    readings.setdefault(reading.pci_bus_id, []).append(reading.busy_percent)
        time.sleep(max(interval, CPU_WINDOW_S / BUSY_READINGS))
    after = cpu_times()
    if before is not None and after is not None and after[1] > before[1]:
        busy = (after[0] - before[0]) / (after[1] - before[1])
        if busy * 100 > CPU_BUSY_PERCENT:
            cores = busy * (hostfacts.read().cpus or 1)  # /proc/stat's share is of every CPU, not ours alone
            found.append(f"the CPUs are {busy * 100:.0f} % busy with other work (about {cores:.1f} cores)")
    found += [
        f"GPU {pci} is {sum(v) / len(v):.0f} % busy before any run"
        for pci, v in sorted(readings.items())
        if v and sum(v) / len(v) > BUSY_PERCENT
    ]
    return found
