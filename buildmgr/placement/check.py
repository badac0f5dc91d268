"""The pure checks: a placement against the devices a build has here (names, one card under two names, overrides,
split modes, -ts), the weights each device would hold from a model's header, and a -dev that uses each card once."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildmgr import backends
from buildmgr.backend_spec import RemovedKernels
from buildmgr.core.device_records import Device, Role, Selection
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Finding, Severity
from buildmgr.placement import rules
from buildmgr.placement.remote import remote_findings
from buildmgr.placement.syntax import COMMON, Placement, bench_args

if TYPE_CHECKING:
    from gguf import GGUFReader


@dataclass(frozen=True)
class Here:
    """What the check needs to know about the build on this host, under the current environment."""

    devices: tuple[Device, ...]  # registry order, CPU-type devices left out
    default: dict[str, Selection]  # name → what llama.cpp does with it without -dev (identity.default_selection)
    commit: str
    moved: dict[str, str] = field(default_factory=dict)  # name → the card it meant at the last stored probe
    free_mib: dict[str, int | None] = field(default_factory=dict)
    host_free_mib: int | None = None
    removed: tuple[RemovedKernels, ...] = ()  # ops whose kernels the build's defines left out


def model_devices(placement: Placement, here: Here) -> tuple[list[str], list[Finding]]:
    """The devices the model gets, as llama_prepare_model_devices picks them; with the findings on -dev and -mg."""
    names = {d.name.lower(): d.name for d in here.devices}
    findings = []
    if placement.devices is None:
        if placement.split_mode == "tensor":
            chosen = [d.name for d in here.devices if d.type != Role.ACCEL]
        else:
            chosen = [n for n, selection in here.default.items() if selection.used]
    else:
        chosen = []
        for name in placement.devices:
            real = names.get(name.lower())
            if real is None and name.lower() == "none":  # 'none' means no device only alone: in a list it is a name
                others = [n for n in placement.devices if n.lower() != "none"]
                findings.append(
                    rules.BY_ID["invalid-device"].error(
                        f"{placement.flag('devices')} {name}",
                        "none means no device only on its own, and in a list it is read as a device's name",
                        f"write {placement.flag('devices')} none, or leave none out of the list"
                        + (f" ({', '.join(others)})" if others else ""),
                        here.commit,
                    )
                )
            elif real is None:
                findings.append(
                    rules.BY_ID["invalid-device"].error(
                        f"{placement.flag('devices')} {name}",
                        f"{name} is not a device of this build here",
                        "valid names here: " + (", ".join(d.name for d in here.devices) or "none (use -dev none)"),
                        here.commit,
                    )
                )
            else:
                chosen.append(real)
    if placement.split_mode == "none" and chosen:
        if not 0 <= placement.main_gpu < len(chosen):
            findings.append(
                rules.BY_ID["main-gpu-out-of-range"].error(
                    f"{placement.flag('main_gpu')} {placement.main_gpu}",
                    f"with -sm none the main GPU indexes the model's {len(chosen)} device(s): {', '.join(chosen)}",
                    f"use -mg 0…{len(chosen) - 1}",
                    here.commit,
                )
            )
            return [], findings
        chosen = [chosen[placement.main_gpu]]
    elif placement.main_gpu and not 0 <= placement.main_gpu < max(len(chosen), 1):
        findings.append(
            Finding(
                Severity.WARNING,
                f"{placement.flag('main_gpu')} {placement.main_gpu}",
                "ignored: the model gets no device here, so there is no main GPU to pick"
                if not chosen
                else f"out of range for {len(chosen)} device(s); llama.cpp checks it only with -sm none",
            )
        )
    return chosen, findings


def check(placement: Placement, here: Here) -> list[Finding]:
    by_name = {d.name: d for d in here.devices}
    by_lower = {d.name.lower(): d for d in here.devices}
    chosen, findings = model_devices(placement, here)
    given = [by_lower[n.lower()] for n in (placement.devices or ()) if n.lower() in by_lower]
    for name, before in here.moved.items():
        if name in {d.name for d in given}:
            findings.append(
                Finding(
                    Severity.WARNING,
                    f"{placement.flag('devices')} {name}",
                    f"{name} is {by_name[name].physical_id} under the current environment, but was {before} at the last "
                    "stored probe",
                    "check that this is the card you mean ('buildmgr devices --refresh')",
                )
            )
    seen: dict[str, str] = {}
    for device in given:
        if seen.get(device.physical_id) == device.name:
            findings.append(
                Finding(Severity.WARNING, f"{placement.flag('devices')} {device.name}", "listed twice", "name it once")
            )
        elif device.physical_id in seen:
            first = by_name[seen[device.physical_id]]
            tags = [backends.virtual_tag(d.backend, d.description) for d in (first, device)]
            findings.append(
                Finding(
                    Severity.WARNING,
                    f"{placement.flag('devices')} {seen[device.physical_id]},{device.name}",
                    f"two virtual devices of one card ({device.physical_id}; {tags[1][1].reason}): a split over them "
                    "runs on that one card"
                    if tags[0] is not None and tags[1] is not None and first.backend == device.backend
                    else f"one physical card under two names ({device.physical_id}): its memory is counted twice and "
                    "the two halves compete for it",
                    f"keep one of {seen[device.physical_id]} and {device.name}",
                    rules.ONE_CARD_TWICE,
                )
            )
        else:
            seen[device.physical_id] = device.name
    findings += _check_overrides(placement, here, chosen)
    findings += _check_split(placement, here, chosen, by_name)
    findings += removed_findings(placement, here.removed, chosen)
    findings += remote_findings(placement, here.devices, here.commit, chosen)
    return findings


def bench_words(placement: Placement) -> list[str]:
    """The placement in llama-bench's syntax, --cpu-moe (which llama-bench lacks) as the override llama.cpp makes of
    it and -ncmoe as itself."""
    if placement.cpu_moe:
        placement = dataclasses.replace(placement, overrides=(*placement.overrides, (FFN_EXPS, "CPU")))
    words = bench_args(placement)
    return words + (["-ncmoe", str(placement.n_cpu_moe)] if placement.n_cpu_moe else [])


def removed_findings(placement: Placement, removed: Sequence[RemovedKernels], chosen: Sequence[str]) -> list[Finding]:
    """The flags ask for ops this build's devices have no kernels for: llama.cpp runs them on the CPU, unsaid. A
    warning (llama.cpp runs, and bench measures it as partial) that `run --check` refuses."""
    findings = []
    if placement.gpu_layers is not None and placement.gpu_layers.strip() in ("0", "+0", "-0"):
        return []  # no layer on a device: nothing of theirs to move
    for gap in removed:
        field_name, value = gap.flag
        on = [name for name in chosen if name.startswith(gap.device_prefix)]
        if getattr(placement, field_name) == value and on:
            findings.append(
                Finding(
                    Severity.WARNING,  # llama.cpp runs; `run --check` refuses it all the same
                    f"{placement.flag(field_name)} {value}",
                    f"{', '.join(gap.ops)} of the layers on {', '.join(on)} would run on the CPU: {gap.what}",
                    f"rebuild without -D {gap.define}={gap.value}, or run without {placement.flag(field_name)} {value}",
                    rules.KERNELS_REMOVED,
                )
            )
    return findings


def _check_overrides(placement: Placement, here: Here, chosen: list[str]) -> list[Finding]:
    findings = []
    buffer_types = [d.name for d in here.devices] + ["CPU"]
    for pattern, target in placement.overrides:
        flag = f"{placement.flag('overrides')} {pattern}={target}"
        if target not in buffer_types:
            findings.append(
                rules.BY_ID["unknown-buffer-type"].error(
                    flag,
                    f"{target} is not a buffer type here",
                    f"valid: {', '.join(buffer_types)}",
                    here.commit,
                )
            )
        elif target != "CPU" and target not in chosen:
            why = (
                f"with -sm none only the main device ({chosen[0]}) holds the model"
                if placement.split_mode == "none" and chosen
                else f"{target} is not one of the model's devices ({', '.join(chosen) or 'none'})"
            )
            fix = f"override onto {' or '.join([*chosen[:1], 'CPU'])}" + (
                "" if placement.split_mode != "none" else f", or use -sm layer with {target} in -dev"
            )
            findings.append(rules.BY_ID["override-outside-devices"].error(flag, why, fix, here.commit))
    return findings


def _check_split(placement: Placement, here: Here, chosen: list[str], by_name: dict[str, Device]) -> list[Finding]:
    findings = []
    backends = {by_name[n].backend for n in chosen if n in by_name}
    flag = f"{placement.flag('split_mode')} {placement.split_mode}"
    failing, ran = rules.split_verdicts(placement.split_mode, backends)
    if placement.split_mode == "row" and failing:
        findings.append(
            rules.BY_ID["row-split-unsupported"].error(
                flag, f"{'/'.join(sorted(failing))} has no row split here", "use -sm layer", here.commit
            )
        )
    if placement.split_mode == "tensor":
        tensor_ran = "/".join(rules.runs_split("tensor"))
        if failing:
            findings.append(
                rules.BY_ID["tensor-split-unsupported"].error(
                    flag,
                    f"a {'/'.join(sorted(failing))} device is in the tensor-parallel set ({', '.join(chosen)})",
                    f"use -sm layer, or -sm tensor over {tensor_ran} devices only",
                    here.commit,
                )
            )
        elif set(ran) != backends:
            findings.append(
                Finding(
                    Severity.WARNING,
                    flag,
                    f"-sm tensor over {'/'.join(sorted(backends))} was never observed; only {tensor_ran}-only sets ran",
                    "--verify",
                )
            )
    if placement.split_mode == "layer" and len(backends) > 1 and not rules.at_pin(here.commit):
        findings.append(
            Finding(
                Severity.NOTE,
                flag,
                f"-sm layer across {' and '.join(sorted(backends))} ran at {rules.PIN}; older llama.cpp failed on "
                f"it, and this build is {here.commit[:7] or 'of an unknown commit'}",
                "--verify",
                rules.CROSS_BACKEND_LAYER,
            )
        )
    if placement.tensor_split and chosen and len(placement.tensor_split) != len(chosen):
        extra = len(placement.tensor_split) > len(chosen)
        findings.append(
            Finding(
                Severity.WARNING,
                f"{placement.flag('tensor_split')} {','.join(f'{v:g}' for v in placement.tensor_split)}",
                f"{len(placement.tensor_split)} entries for {len(chosen)} device(s): "
                + ("the extra ones are ignored" if extra else "devices without an entry get no layers"),
                f"give one entry per device ({', '.join(chosen)})",
            )
        )
    return findings


# --- memory from the model's header ------------------------------------------------------------------------------


# common/common.h at the pin: --cpu-moe and -ncmoe N keep these expert tensors on the CPU.
FFN_EXPS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def cpu_overrides(placement: Placement) -> tuple[tuple[str, str], ...]:
    """-ot as given, then what --cpu-moe / -ncmoe N add (llama.cpp appends them the same way)."""
    extra = [(FFN_EXPS, "CPU")] if placement.cpu_moe else []
    extra += [(rf"blk\.{i}{FFN_EXPS}", "CPU") for i in range(placement.n_cpu_moe or 0)]
    return placement.overrides + tuple(extra)


def read_gguf(model: Path) -> GGUFReader:
    """The model's GGUF header and tensor index (no weights are read); UserError if it is not a GGUF."""
    try:
        from gguf import GGUFReader

        return GGUFReader(str(model))
    except (OSError, ValueError, KeyError) as err:
        raise UserError(f"{model} is not a GGUF model ({err})") from None


def weights_per_device(placement: Placement, model: Path, here: Here, chosen: list[str]) -> dict[str, int]:
    """Bytes of weights each device would hold: the last -ngl layers (all by default) split over the devices by -ts
    (else by free memory), the others on the CPU, and -ot / --cpu-moe / -ncmoe matches moved."""
    tensors = [(t.name, int(t.n_bytes)) for t in read_gguf(model).tensors]
    layers = sorted({int(m.group(1)) for name, _ in tensors if (m := re.match(r"blk\.(\d+)\.", name))})
    offloaded = layers
    if placement.gpu_layers is not None and placement.gpu_layers.isdigit():
        offloaded = layers[len(layers) - min(int(placement.gpu_layers), len(layers)) :]
    shares = list(placement.tensor_split[: len(chosen)]) or [float(here.free_mib.get(n) or 1) for n in chosen]
    shares += [0.0] * (len(chosen) - len(shares))
    total_share = sum(shares) or 1.0
    bounds = list(itertools.accumulate(s / total_share * len(offloaded) for s in shares))
    owner = {
        layer: next((chosen[i] for i, bound in enumerate(bounds) if position < round(bound)), chosen[-1])
        for position, layer in enumerate(offloaded)
        if chosen
    }
    overrides = cpu_overrides(placement)
    placed: dict[str, int] = {}
    for name, size in tensors:
        layer = re.match(r"blk\.(\d+)\.", name)
        where = next((t for pattern, t in overrides if re.search(pattern, name)), None) or (
            owner.get(int(layer.group(1)), "CPU")
            if layer
            else chosen[-1]
            if chosen and name.startswith("output") and len(offloaded) == len(layers)
            else "CPU"
        )
        placed[where] = placed.get(where, 0) + size
    return placed


def memory_findings(placed: dict[str, int], here: Here) -> list[Finding]:
    findings = []
    by_name = {d.name: d for d in here.devices}
    for name, size in placed.items():
        device = by_name.get(name)
        igpu = device is not None and device.type == Role.IGPU
        free = here.host_free_mib if name == "CPU" or igpu else here.free_mib.get(name)
        if free is not None and size / (1 << 20) > free:
            findings.append(
                Finding(
                    Severity.WARNING,
                    name,
                    f"about {size / (1 << 20):.0f} MiB of weights against {free} MiB free"
                    + (" (an iGPU's memory is the host's)" if igpu else ""),
                    "offload fewer layers (-ngl), move tensors to the CPU (-ot …=CPU), or spread over more devices",
                )
            )
    return findings


@dataclass(frozen=True)
class Suggestion:
    """A -dev that uses each physical card once, with -ts by free memory."""

    devices: tuple[str, ...]
    tensor_split: tuple[int, ...]

    def flags(self) -> str:
        """In llama-cli's syntax; -ts only for more than one device."""
        shares = COMMON.tensor_split[0].join(map(str, self.tensor_split))
        return f"-dev {COMMON.devices.join(self.devices)}" + (f" -ts {shares}" if len(self.devices) > 1 else "")

    def to_json(self) -> dict[str, list[Any]]:
        return {"devices": list(self.devices), "tensor_split": list(self.tensor_split)}


def suggest(devices: list[Device], default: dict[str, Selection], prefer: str) -> Suggestion:
    """One name per physical card (llama.cpp's own choice of name first), discrete cards first; -ts by free memory."""
    roles = {"dgpu": (Role.GPU,), "igpu": (Role.IGPU,), "all": (Role.GPU, Role.IGPU, Role.UNKNOWN)}[prefer]
    chosen_by_llama = {name for name, selection in default.items() if selection.used}
    ranked = sorted(devices, key=lambda d: (d.name not in chosen_by_llama, devices.index(d)))
    chosen: dict[str, Device] = {}
    for device in ranked:
        if device.type in roles and device.physical_id not in chosen:
            chosen[device.physical_id] = device
    picked = sorted(chosen.values(), key=lambda d: (roles.index(d.type), devices.index(d)))
    free = [d.memory_free_mib or 0 for d in picked]
    unit = min((f for f in free if f), default=1)
    return Suggestion(tuple(d.name for d in picked), tuple(max(1, round(f / unit)) for f in free))
