"""Where each op of a model runs: llama.cpp's own scheduler assignments (GGML_SCHED_DEBUG=2 with -v), read from a
run's log into the prefill and the decode graph it reserved, and judged against the device each layer's weights were
given. Pure: the run is placement.cover's."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from buildmgr.backend_spec import RemovedKernels
from buildmgr.core import units

HOST = "CPU"  # the CPU backend's name in the scheduler's lines
PHASES = ("prefill", "decode")
# The scheduler prints an op in 10 characters (ggml_op_desc, "%10.10s"): the longer names of the pin's ggml that an
# inference graph holds, each the only one so begun once the training ops (…_BACK, OPT_…, CROSS_…) are left out.
LONG_OPS = (
    "FLASH_ATTN_EXT", "GATED_LINEAR_ATTN", "GATED_DELTA_NET", "LIGHTNING_INDEXER", "TIMESTEP_EMBEDDING",
    "PAD_REFLECT_1D", "GET_REL_POS", "ADD_REL_POS", "COUNT_EQUAL", "DSV4_HC_COMB", "DSV4_HC_PRE", "DSV4_HC_POST",
    "HARDSIGMOID", "GEGLU_QUICK", "SWIGLU_CLAMP",
)  # fmt: skip
_WHOLE = {name[:10]: name for name in LONG_OPS}

_RESERVE = re.compile(r"graph_reserve: reserving a graph for ubatch with n_tokens =\s*(\d+)")
_SPLIT = re.compile(r"^## SPLIT #(\d+): (\S+) # (\d+) inputs(?:: (.*))?$")
_INPUT = re.compile(r"\[(.+?) \(\s*(\d+)([KM]?)\)\]")
_NODE = re.compile(r"^node #\s*(\d+) \((.{10})\): (.{20}) \((.{5})\) \[(.{5}) .{8}\] use=\d+,c=\d+:(.*)$")
_SOURCE = 46  # " %20.20s (%5.5s) [%5.5s %8.8s]"
NAME_WIDTH = 20  # "%20.20s": a name of 20 characters may have been cut
LAYER_LINE = re.compile(r"load_tensors: layer\s+(\d+) assigned to device (\S+?),")
_KV = re.compile(r"llama_kv_cache: layer\s+(\d+): dev = (\S+)")
OVERRIDE_LINE = re.compile(r"tensor (\S+) \(.*\) buffer type overridden to (\S+)")
_MOVED = re.compile(
    r"tensor '(\S+)' \((\S+)\) \(and (\d+) others\) cannot be used with preferred buffer type (\S+), using (\S+) instead"
)
# what llama.cpp's -fa auto resolved to, once the context's graph was probed (llama-context.cpp, resolve_fused_ops)
_FA_AUTO = re.compile(r": Flash Attention (enabled|not supported, set to disabled)$")
# llama.cpp made the KV cache before it resolved auto (llama-context.cpp), in FlashAttention's layout; without it
# each token copies V transposed (llama-graph.cpp: "avoid this branch")
FA_AUTO_OFF = (
    "-fa auto turned FlashAttention off here, after the KV cache was laid out for it: each token copies every "
    "layer's V transposed, more with depth; -fa 0 does not"
)
_SUFFIX = re.compile(r"-(\d+)$")
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Source:
    name: str  # as printed: at most 20 characters
    device: str  # the first 5 characters of its backend's name

    @property
    def weight(self) -> bool:
        return self.name.startswith(("blk.", "output", "token_embd")) and "(" not in self.name


@dataclass(frozen=True)
class Node:
    op: str
    name: str
    device: str  # its split's backend, in full
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class Split:
    device: str
    inputs: tuple[tuple[str, int], ...]  # name, bytes (as the scheduler rounds them: whole KiB or MiB)
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class Graph:
    tokens: int
    splits: tuple[Split, ...]


@dataclass(frozen=True)
class Moved:
    """The loader's note that weights could not go where their layer is (a type the device's kernels lack)."""

    tensor: str
    type: str
    others: int
    preferred: str
    to: str


@dataclass(frozen=True)
class Log:
    graphs: tuple[Graph, ...]  # those llama.cpp reserved, in order
    layers: dict[int, str]  # layer → the device the loader assigned it (the last is the output layer)
    overridden: dict[str, str]  # tensor → the buffer type the user's -ot gave it
    moved: tuple[Moved, ...]
    kv: dict[int, str]  # layer → the device its KV cache is on (the CPU with -nkvo)
    flash_attn_auto: bool | None = None  # what -fa auto turned FlashAttention to (None: not auto, or not said)


def _size(number: str, unit: str) -> int:
    """A size the scheduler printed with "%5.5s": K or M, and none where 10000M and more lost its M."""
    return int(number) * units.LETTERS[unit or "M"]


def _sources(rest: str) -> tuple[Source, ...]:
    found = []
    for start in range(0, len(rest) - _SOURCE + 1, _SOURCE):
        chunk = rest[start : start + _SOURCE]
        found.append(Source(chunk[1:21].strip(), chunk[31:36].strip()))
    return tuple(found)


def read(text: str) -> Log:
    """The reserved graphs (each begins after llama.cpp's 'reserving a graph' line and ends at the next graph) and
    what the loader said of each layer's device, the user's overrides and the weights it could not place."""
    graphs: list[Graph] = []
    tokens: int | None = None  # inside a reserved graph: its size
    splits: list[Split] = []
    layers: dict[int, str] = {}
    overridden: dict[str, str] = {}
    moved: list[Moved] = []
    kv: dict[int, str] = {}
    flash_attn_auto: bool | None = None

    def close() -> None:
        nonlocal tokens, splits
        if tokens is not None and splits:
            graphs.append(Graph(tokens, tuple(splits)))
        tokens, splits = None, []

    for line in text.splitlines():
        if reserve := _RESERVE.search(line):
            close()
            tokens = int(reserve.group(1))
        elif split := _SPLIT.match(line):
            if split.group(1) == "0":
                if splits:
                    close()  # a graph printed with no 'reserving' line before it: a real run's, not reserved
            if tokens is not None:
                inputs = tuple((n, _size(s, u)) for n, s, u in _INPUT.findall(split.group(4) or ""))
                splits.append(Split(split.group(2), inputs, ()))
        elif node := _NODE.match(line):
            if tokens is not None and splits:
                op = node.group(2).strip()
                entry = Node(_WHOLE.get(op, op), node.group(3).strip(), splits[-1].device, _sources(node.group(6)))
                splits[-1] = Split(splits[-1].device, splits[-1].inputs, (*splits[-1].nodes, entry))
        elif layer := LAYER_LINE.search(line):
            layers[int(layer.group(1))] = layer.group(2)
        elif cache := _KV.search(line):
            kv[int(cache.group(1))] = cache.group(2)
        elif override := OVERRIDE_LINE.search(line):
            overridden[override.group(1)] = override.group(2)
        elif found := _MOVED.search(line):
            moved.append(Moved(found.group(1), found.group(2), int(found.group(3)), found.group(4), found.group(5)))
        elif resolved := _FA_AUTO.search(line):
            flash_attn_auto = resolved.group(1) == "enabled"
    close()
    return Log(tuple(graphs), layers, overridden, tuple(moved), kv, flash_attn_auto)


# --- judging --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Off:
    """Ops of one kind that ran on another device than their layers' weights, and why where it can be known."""

    op: str
    device: str
    home: str
    layers: tuple[int, ...]
    count: int
    cause: str

    def line(self) -> str:
        return f"{self.op} ×{self.count} on {self.device} ({self.cause})"

    def to_json(self) -> dict[str, object]:
        return {
            "op": self.op,
            "device": self.device,
            "layer_device": self.home,
            "layers": list(self.layers),
            "count": self.count,
            "cause": self.cause,
        }


@dataclass(frozen=True)
class GraphCoverage:
    phase: str  # prefill | decode
    tokens: int
    ops: dict[str, dict[str, int]]  # op → device → nodes
    splits: int
    copied_bytes: int  # the split inputs: what crosses between devices for one graph
    off: tuple[Off, ...]

    @property
    def copied_per_token(self) -> float:
        return self.copied_bytes / max(self.tokens, 1)

    def to_json(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "tokens": self.tokens,
            "ops": self.ops,
            "splits": self.splits,
            "copied_bytes": self.copied_bytes,
            "copied_bytes_per_token": round(self.copied_per_token),
            "off_layer_device": [o.to_json() for o in self.off],
        }


@dataclass(frozen=True)
class Coverage:
    layers: dict[str, int]  # device → repeating layers the loader gave it
    graphs: tuple[GraphCoverage, ...]
    flash_attn_auto: bool | None = None  # what -fa auto resolved to in the run (None: -fa was given, or not said)

    def off(self, phases: Sequence[str] = PHASES) -> list[Off]:
        """Each kind of op off its layers' device in these graphs, once: from the graph where it is most."""
        kinds: dict[tuple[str, str, str], Off] = {}
        for graph in (g for g in self.graphs if g.phase in phases):
            for off in graph.off:
                key = (off.op, off.device, off.cause)
                if key not in kinds or kinds[key].count < off.count:
                    kinds[key] = off
        return list(kinds.values())

    def partial_in(self, phases: Sequence[str]) -> str | None:
        """One line where layers placed on a device ran compute ops on the CPU in these graphs (a prefill row is
        judged by the prefill graph, a decode row by the decode graph); None where none did."""
        return "; ".join(o.line() for o in self.off(phases) if o.device == HOST) or None

    @property
    def partial(self) -> str | None:
        return self.partial_in(PHASES)

    def to_json(self) -> dict[str, object]:
        return {
            "layers": self.layers,
            "graphs": [g.to_json() for g in self.graphs],
            "partial": self.partial,
            "flash_attn_auto": self.flash_attn_auto,
        }


def _layer_of(node: Node, current: int | None, output: int | None) -> int | None:
    """The layer a node belongs to: its name's '-N' (llama.cpp names the tensors of layer N so) where the name is whole
    (the scheduler prints 20 characters: 'ffn_moe_swiglu_oai-12' reads '…oai-1'), its weight's block, the output layer
    for the output weights (a tied one multiplies by token_embd), none for the input lookup; else the layer of the
    nodes before it."""
    if len(node.name) < NAME_WIDTH and (suffix := _SUFFIX.search(node.name)):
        return int(suffix.group(1))
    for source in node.sources:
        if block := _BLOCK.match(source.name):
            return int(block.group(1))
        if source.name.startswith("output") or (source.name.startswith("token_embd") and node.op != "GET_ROWS"):
            return output
        if source.name.startswith("token_embd"):
            return None
    return current


def _placed_by_user(node: Node, layer: int | None, log: Log, chosen: set[str], lacking: bool) -> bool:
    """On the CPU because the user put what it reads there: a weight an -ot sent to the CPU, the KV cache -nkvo keeps
    there, or the result of a node already so placed (the activations between two overridden matrices), or a view of
    it, unless the build lacks the op's kernels (`lacking`: the device's other inputs would have drawn it there)."""
    for source in node.sources:
        if source.device != node.device[:5]:
            continue
        if source.weight and any(name.startswith(source.name) for name in log.overridden):
            return True
        if source.name.startswith("cache_") and layer is not None and log.kv.get(layer) == node.device:
            return True
        # a view of such a node (a reshape: the routing after an MoE's router) is not printed, but named after it
        if source.name.split(" (", 1)[0] in chosen and not lacking:
            return True
    return False


def _removed(node: Node, home: str, removed: Sequence[RemovedKernels]) -> RemovedKernels | None:
    """The build's define that took this op's kernels from its layer's device, if one did."""
    return next((g for g in removed if node.op in g.ops and home.startswith(g.device_prefix)), None)


def _cause(node: Node, home: str, log: Log, removed: Sequence[RemovedKernels]) -> str:
    """Why a node left its layer's device: a define of the build, a weight the loader could not place there, or the
    backend's own refusal."""
    if (gap := _removed(node, home, removed)) is not None:
        return gap.message
    for source in node.sources:
        if not source.weight or source.device != node.device[:5]:
            continue
        for moved in log.moved:
            if moved.preferred.startswith(home) or home.startswith(moved.preferred):
                return (
                    f"{home} has no {node.op} kernel for {moved.type} weights: the loader kept {moved.tensor}"
                    + (f" and {moved.others} others" if moved.others else "")
                    + f" on the {moved.to}"
                )
        return f"its weights ({source.name}) are on the {node.device}"
    return f"{home} does not run {node.op} on these operands: a type, head size or shape its kernels do not cover"


def judge(graph: Graph, phase: str, log: Log, removed: Sequence[RemovedKernels]) -> GraphCoverage:
    ops: dict[str, dict[str, int]] = {}
    found: dict[tuple[str, str, str, str], list[int]] = {}
    output = max(log.layers) if log.layers else None
    current: int | None = None
    chosen: set[str] = set()  # nodes the CPU runs because of where the user put their inputs (20-character names)
    for split in graph.splits:
        for node in split.nodes:
            ops.setdefault(node.op, {}).setdefault(node.device, 0)
            ops[node.op][node.device] += 1
            current = _layer_of(node, current, output)
            home = log.layers.get(current) if current is not None else None
            # only the CPU doing a device's work is a fallback: a device running a CPU layer's op is op offload
            if home is None or node.device == home or node.device != HOST:
                continue
            if _placed_by_user(node, current, log, chosen, _removed(node, home, removed) is not None):
                chosen.add(node.name)
                continue
            cause = _cause(node, home, log, removed)
            assert current is not None
            found.setdefault((node.op, node.device, home, cause), []).append(current)
    off = tuple(
        Off(op, device, home, tuple(sorted(set(layers))), len(layers), cause)
        for (op, device, home, cause), layers in found.items()
    )
    copied = sum(size for split in graph.splits for _, size in split.inputs)
    return GraphCoverage(phase, graph.tokens, ops, len(graph.splits), copied, off)


def cover(log: Log, removed: Sequence[RemovedKernels] = ()) -> Coverage | None:
    """The prefill graph (the last reserved with the most tokens) and the decode graph (the last of one token) of the
    run's last context; None where the log holds no reserved graph (GGML_SCHED_DEBUG or -v did not take)."""
    if not log.graphs:
        return None
    prefill = max(reversed(log.graphs), key=lambda g: g.tokens)
    decode = next((g for g in reversed(log.graphs) if g.tokens == 1), None)
    chosen = [("prefill", prefill)] + ([("decode", decode)] if decode is not None and decode is not prefill else [])
    repeating = {k: v for k, v in log.layers.items() if k != max(log.layers, default=None)}
    counts: dict[str, int] = {}
    for device in repeating.values():
        counts[device] = counts.get(device, 0) + 1
    graphs = tuple(judge(graph, phase, log, removed) for phase, graph in chosen)
    return Coverage(counts, graphs, log.flash_attn_auto)
