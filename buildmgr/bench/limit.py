"""How far a decode is from the physical limit: each device's share of the weights (the load log's model buffers),
the bytes it reads per generated token (tensor by tensor from the GGUF, where the load log put each: dense tensors
whole, experts by the share a token uses, one row of a lookup table; plus its KV cache at the depth), and the
memory-bandwidth bound those bytes give at each device's peak (bench/bandwidth says what each peak is). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from buildmgr.bench.logs import LoadLog
from buildmgr.core import units

CPU = "CPU"  # every CPU-side buffer (CPU, CPU_Mapped, CPU_REPACK, CUDA_Host …) and the CPU's energy
NEGLIGIBLE = 0.001  # of a token's bytes: a device reading less bounds nothing
_BLOCK = re.compile(r"^blk\.(\d+)\.")
# llama.cpp's tensor names (src/llama-arch.cpp at the pin): expert tensors, merged (ffn_up_exps, ffn_gate_up_exps,
# the chunked _chexps) or one per expert (blk.N.ffn_up.E.weight); the tables a token looks up one row of
_EXPERTS = re.compile(r"_(ch)?exps\.|\.ffn_(gate|up|down)\.\d+\.weight$")
_LOOKUP = re.compile(r"(^|\.|_)(token_embd|position_embd|per_layer_token_embd)\.weight$")


@dataclass(frozen=True)
class Holding:
    """A device's share of the weights, from the load log's model buffers (`CPU`: every CPU-side buffer)."""

    device: str
    weights_mib: float
    share: float


@dataclass(frozen=True)
class Limit:
    """A decode row's memory-bandwidth bound: each device reads its bytes once per token at its peak bandwidth; the
    devices of a layer split take turns, so their times add (with -sm row/tensor the GPUs read at once)."""

    limit_ts: float | None
    percent: float | None  # of the limit the median reached
    read_mb: dict[str, float]  # device → MB read per token
    bandwidth_gbs: dict[str, float | None]
    unknown: str | None = None  # why there is no limit


def device_of(buffer: str, devices: Sequence[str]) -> str:
    """The device a buffer type belongs to: CUDA0 and CUDA0_Split are CUDA0's; the rest is the CPU's."""
    return next((d for d in devices if buffer == d or buffer.startswith(f"{d}_")), CPU)


def holdings(load: LoadLog, devices: Sequence[str]) -> tuple[Holding, ...]:
    """Each device's weights and share (the CPU last, where it holds any)."""
    mib: dict[str, float] = dict.fromkeys(devices, 0.0)
    for buffer, size in load.weights().items():
        owner = device_of(buffer, devices)
        mib[owner] = mib.get(owner, 0.0) + size
    total = sum(mib.values())
    if not total:
        return ()
    return tuple(Holding(d, round(m, 2), round(m / total, 4)) for d, m in mib.items() if d != CPU or m)


@dataclass(frozen=True)
class ModelBytes:
    """What decoding a token reads of a model, from its GGUF header (each tensor's type and shape give its bytes)."""

    tensors: tuple[tuple[str, int, int], ...]  # name, bytes, rows (ggml's last dimension: a lookup reads one)
    expert_share: float  # experts used per token over experts (1.0: no experts)

    @property
    def tied(self) -> bool:
        """No output.weight: the LM head multiplies by token_embd.weight, read whole."""
        return not any(name == "output.weight" for name, _, _ in self.tensors)


def _tensor_device(name: str, load: LoadLog, devices: Sequence[str]) -> str:
    """Where the run put a tensor: an -ot's buffer type, else its layer's device (the output layer's for output.*),
    else the CPU (the input layer: llama.cpp keeps it there)."""
    if name in load.overridden:
        return device_of(load.overridden[name], devices)
    if (block := _BLOCK.match(name)) and int(block.group(1)) in load.layers:
        return load.layers[int(block.group(1))]  # a device outside `devices` stays itself: its bandwidth is unknown
    if name.startswith("output") and load.layers:
        return load.layers[max(load.layers)]
    return CPU


def weights_read(model: ModelBytes, load: LoadLog, devices: Sequence[str]) -> dict[str, float]:
    """MiB of weights each device reads per decoded token, tensor by tensor: dense tensors whole, expert tensors by
    the share of experts a token uses, one row of the token embeddings (all of them again where the head is tied)."""
    read: dict[str, float] = {}
    for name, size, rows in model.tensors:
        device = _tensor_device(name, load, devices)
        if _LOOKUP.search(name):
            share = 1 / max(rows, 1)
            if model.tied and name == "token_embd.weight":
                out = _tensor_device("output.weight", load, devices)
                read[out] = read.get(out, 0.0) + size / 2**20
        elif _EXPERTS.search(name):
            share = model.expert_share
        else:
            share = 1.0
        read[device] = read.get(device, 0.0) + size * share / 2**20
    return read


def read_per_token(
    held: Sequence[Holding], load: LoadLog, test: int, n_depth: int, n_gen: int, model: ModelBytes | None
) -> dict[str, float]:
    """MB each device reads per generated token: its weights, tensor by tensor where the load log says where each
    layer went (else what its model buffers hold, the CPU's less the token embeddings, of which a token reads one
    row), and its KV cache's share of the cells a token attends to on average (the depth and half the tokens
    generated), from the test's own context."""
    devices = [h.device for h in held if h.device != CPU]
    if model is not None and load.layers:
        read = weights_read(model, load, devices)
    else:
        looked_up = sum(size / 2**20 for name, size, _ in model.tensors if _LOOKUP.search(name)) if model else 0.0
        looked_up = 0.0 if model is not None and model.tied else looked_up  # a tied head reads the table whole
        read = {h.device: h.weights_mib - (looked_up if h.device == CPU else 0.0) for h in held}
    cells = load.cells.get(test)
    for buffer, size in load.kv.get(test, {}).items() if cells else ():
        owner = device_of(buffer, devices)
        assert cells is not None
        read[owner] = read.get(owner, 0.0) + size * min((n_depth + n_gen / 2) / cells, 1.0)
    return {d: round(max(v, 0.0) * units.MB_PER_MIB, 2) for d, v in read.items()}


def decode_limit(
    read_mb: Mapping[str, float],
    bandwidth: Mapping[str, tuple[float | None, str]],
    median: float | None,
    parallel: bool = False,
) -> Limit:
    """tokens/s if every device read its bytes at its peak bandwidth, one after another (a layer split takes turns),
    or at once (`parallel`: -sm row and tensor, where the slowest device bounds); and the median's share."""
    gbs = {d: bandwidth.get(d, (None, "no bandwidth known"))[0] for d in read_mb}
    total = sum(read_mb.values())
    # a device reading a token-embedding row (under 0.1 % of the bytes) bounds nothing, known bandwidth or not
    counted = {d: mb for d, mb in read_mb.items() if mb > total * NEGLIGIBLE}
    lacking = [d for d, mb in counted.items() if gbs[d] is None]
    if lacking:
        why = "; ".join(f"{d}: {bandwidth.get(d, (None, 'no bandwidth known'))[1]}" for d in lacking)
        return Limit(None, None, dict(read_mb), gbs, f"no peak bandwidth for {why}")
    times = {d: mb / 1000 / g for d, mb in counted.items() if (g := gbs[d])}
    # -sm row/tensor: the GPUs read at once, the CPU's share before or after them
    gpus = [t for d, t in times.items() if d != CPU]
    seconds = times.get(CPU, 0.0) + max(gpus, default=0.0) if parallel else sum(times.values())
    if not seconds:
        return Limit(None, None, dict(read_mb), gbs, "no bytes read per token were found in the load log")
    limit = 1 / seconds
    percent = round(median / limit * 100, 1) if median else None
    return Limit(round(limit, 2), percent, dict(read_mb), gbs)


def time_shares(read_mb: Mapping[str, float], bandwidth: Mapping[str, tuple[float | None, str]]) -> dict[str, float]:
    """Each device's expected share of a token's time at the bandwidth bound (empty where a bandwidth is unknown)."""
    times = {}
    total = sum(read_mb.values())
    for device, mb in read_mb.items():
        if mb <= total * NEGLIGIBLE:
            continue
        gbs = bandwidth.get(device, (None, ""))[0]
        if gbs is None:
            return {}
        times[device] = mb / gbs
    total = sum(times.values())
    return {d: t / total for d, t in times.items()} if total else {}
