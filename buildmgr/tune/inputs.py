"""What tune reads before anything runs: the cards here (each with every name it has) and what each device and the
host may hold, the model's shape from its GGUF header, the margins that make llama.cpp's fit see an emulated card,
and the build's llama-fit-params."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from buildmgr.bench import config as bench_config
from buildmgr.core.errors import UserError
from buildmgr.placement.check import Here, model_devices, read_gguf
from buildmgr.placement.syntax import Placement
from buildmgr.tune import oracle, space
from buildmgr.tune.config import HOST_NAMES, TuneRequest
from buildmgr.tune.result import RaceEntry

if TYPE_CHECKING:
    from buildmgr.store import Build


def cards(here: Here, memory: Mapping[str, int]) -> tuple[tuple[space.TuneCard, ...], dict[str, int | None]]:
    """The cards here, each with every name it has (one physical id), and what each device and the host may hold:
    `--memory` where given (a name that is no device here, or a size past what is free, is exit 2)."""
    names = {d.name for d in here.devices}
    unknown = [n for n in memory if n not in names and n not in HOST_NAMES]
    if unknown:
        valid = ", ".join([*sorted(names), "CPU"])
        raise UserError(f"--memory {unknown[0]}: not a device of this build here; valid: {valid}")
    capacity: dict[str, int | None] = {}
    grouped: dict[str, list[str]] = {}
    for device in here.devices:
        key = device.physical_id or device.name
        grouped.setdefault(key, []).append(device.name)
        free = here.free_mib.get(device.name)
        asked = memory.get(device.name)
        if asked is not None and free is not None and asked > free:
            raise UserError(f"--memory {device.name}={asked}MiB: more than its {free} MiB free; ask for less")
        capacity[device.name] = asked if asked is not None else free
    host = next((memory[n] for n in HOST_NAMES if n in memory), None)
    capacity[oracle.HOST] = host if host is not None else here.host_free_mib
    found = []
    for group in grouped.values():
        held = [room for n in group if (room := capacity[n]) is not None]
        found.append(space.TuneCard(tuple(group), min(held) if held else None))
    return tuple(found), capacity


def shape(model: Path) -> tuple[space.Shape, int]:
    """The model's layers and weights (MiB) from its GGUF header, and its vocabulary's size (0: bare ids, which no
    text tool takes)."""
    reader = read_gguf(model)
    layers: dict[int, float] = {}
    experts = other = 0.0
    for tensor in reader.tensors:
        mib = int(tensor.n_bytes) / (1 << 20)
        parts = tensor.name.split(".")
        if parts[0] == "blk" and parts[1].isdigit():
            layers[int(parts[1])] = layers.get(int(parts[1]), 0.0) + mib
            experts += mib if "_exps" in tensor.name else 0.0
        else:
            other += mib
    count = max(len(layers), 1)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    kind = reader.fields.get("tokenizer.ggml.model")
    # bare ids (tokenizer "none"): llama-bench runs them, llama-server cannot (it asserts as it detokenizes)
    bare = kind is not None and bytes(kind.parts[-1]).decode() == "none"
    vocab = 0 if bare else len(tokens.data) if tokens is not None else 32000
    return space.Shape(len(layers), sum(layers.values()) / count, experts / count, other), vocab


def margins(here: Here, capacity: Mapping[str, int | None], free_now: Mapping[str, int]) -> list[int]:
    """-fitt for llama.cpp's fit: its margin on each device it would use, plus what --memory keeps out of reach, from
    the free memory llama.cpp itself sees now (`free_now`; a stored probe's figure can be hundreds of MiB off, and
    then the fit fills more than the emulated card holds)."""
    chosen, _ = model_devices(Placement(), here)
    found = []
    for name in chosen:
        free, room = free_now.get(name, here.free_mib.get(name)), capacity.get(name)
        extra = free - room if free is not None and room is not None else 0
        found.append(space.FIT_MARGIN_MIB + max(extra, 0))
    return found


def config_of(entry: RaceEntry, build_id: str) -> bench_config.BenchConfig:
    words = list(entry.candidate.words)
    return bench_config.from_words(entry.candidate.label, build_id, words, shlex.join(words))


def fit_tool(build: Build) -> Path:
    path = build.tool(oracle.TOOL)
    if not path.is_file():
        raise UserError(
            f"build {build.id} has no {oracle.TOOL} (built before tune needed it): build its recipe again "
            f"(buildmgr build {build.receipt.recipe.name}), which now builds it"
        )
    return path


def bench_request_of(request: TuneRequest) -> bench_config.BenchRequest:
    """The bench request every candidate's processes run under: tune's workload at its one depth, and the cards'
    energy counters read alone only where energy is the objective."""
    workload = bench_config.Workload(
        request.n_prompt,
        request.n_gen,
        (request.depth,),
        pg=False,
        runs=request.max_runs,
        repetitions=request.repetitions,
        warmup=request.warmup,
    )
    return bench_config.BenchRequest(
        request.model,
        (),
        workload,
        request.interval,
        allow_busy=request.allow_busy,
        allow_pinned=request.allow_pinned,
        timed_energy=request.objective is space.Objective.J_PER_TOKEN,
    )
