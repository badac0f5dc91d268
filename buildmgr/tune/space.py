"""The placements `tune` may try for one model on this host, written as the flags a user types for llama-cli: each
card once (under each name it has here, one at a time), every split mode over several cards, layers or experts kept
on the CPU where the model does not fit the cards; then, one factor at a time, FlashAttention on and off, a larger
micro-batch for prefill, and the thread counts where the CPU computes. The race takes them in stages (the placement,
then each factor on the winner so far: the cost adds rather than multiplies); `grid` is their whole product. Pure:
what fits and what runs is decided later, by llama.cpp."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from buildmgr.placement import syntax

# llama.cpp's own margin per device for --fit (common/arg.cpp at the pin: -fitt, default 1024 MiB)
FIT_MARGIN_MIB = 1024
# How many offload steps past the least one memory allows are tried: the first that fits by llama.cpp's estimate is
# not always the fastest (a compute buffer or the KV cache needs room too), and more steps only move weights away.
OFFLOAD_STEPS = 3
SPLITS = ("row", "tensor")  # beside llama.cpp's default, -sm layer
UB_PREFILL = 2048  # llama.cpp's default -ub is 512; prefill of a large batch gains from more (issue #49: 1.54×)


class Objective(Enum):
    TG = "tg"  # decode tokens/s at the depth
    PP = "pp"  # prefill tokens/s at the depth
    J_PER_TOKEN = "j_per_token"  # decode's energy per token at the depth, every device that works counted

    @property
    def unit(self) -> str:
        """What the race compares (higher is better): energy as its inverse, tokens per joule."""
        return "tokens/J" if self is Objective.J_PER_TOKEN else "t/s"


@dataclass(frozen=True)
class TuneCard:
    """One physical card and every name it has here (CUDA0 and Vulkan0 of one GPU): tried under one name at a time."""

    names: tuple[str, ...]
    capacity_mib: int | None  # what tune may fill: --memory, else what is free now


@dataclass(frozen=True)
class Shape:
    """What the space needs of the model, from its GGUF header."""

    layers: int
    layer_mib: float  # the weights of one repeating layer, on average
    expert_mib: float  # of those, its expert tensors (0: a dense model)
    other_mib: float  # the weights outside the layers (embeddings, output)

    @property
    def moe(self) -> bool:
        return self.expert_mib > 0

    @property
    def weights_mib(self) -> float:
        return self.layers * self.layer_mib + self.other_mib


@dataclass(frozen=True)
class Space:
    cards: tuple[TuneCard, ...]
    shape: Shape
    objective: Objective
    threads: tuple[int, ...] = ()  # -t values beside llama.cpp's default, tried where the CPU computes


@dataclass(frozen=True)
class TuneCandidate:
    label: str
    words: tuple[str, ...]  # llama-cli's flags: the placement and the options tune varies
    seed: bool = False  # llama.cpp's own --fit answer
    cpu: bool = False  # the CPU computes part of the model (so its threads matter)

    def to_json(self) -> dict[str, object]:
        return {"label": self.label, "flags": list(self.words), "seed": self.seed}


def _offload(cards: Sequence[TuneCard], shape: Shape) -> list[tuple[str, tuple[str, ...]]]:
    """Nothing kept on the CPU where the weights fit the cards' capacity with llama.cpp's margin; else the fewest
    layers' experts (-ncmoe) or layers (-ngl) that would make them fit by weight alone, and a few steps more."""
    capacities = [c.capacity_mib for c in cards]
    if any(c is None for c in capacities):
        return [("", ())]
    room = sum(c for c in capacities if c is not None) - FIT_MARGIN_MIB * len(cards)
    over = shape.weights_mib - room
    if over <= 0:
        return [("", ())]
    if shape.moe:
        least = max(1, math.ceil(over / shape.expert_mib))
        steps = [k for k in range(least, least + OFFLOAD_STEPS + 1) if k < shape.layers]
        return [(f"ncmoe{k}", ("-ncmoe", str(k))) for k in steps] + [("cmoe", ("--cpu-moe",))]
    most = math.floor((room - shape.other_mib) / shape.layer_mib)
    steps = [n for n in range(most, most - OFFLOAD_STEPS - 1, -1) if n > 0]
    return [(f"ngl{n}", ("-ngl", str(n))) for n in steps] or [("ngl0", ("-ngl", "0"))]


def _device_sets(cards: Sequence[TuneCard]) -> list[tuple[str, ...]]:
    """Every non-empty set of cards, each card under one of its names: never two names of one card together."""
    sets = []
    for size in range(1, len(cards) + 1):
        for chosen in itertools.combinations(cards, size):
            sets += list(itertools.product(*(c.names for c in chosen)))
    return sets


Level = tuple[str, tuple[str, ...]]  # a factor's value: its label ("" for llama.cpp's default) and its flags


def placements(space: Space, seed: Sequence[str]) -> list[TuneCandidate]:
    """The first stage: llama.cpp's own fit (the seed, first), then every placement of the model on these cards,
    each with llama.cpp's defaults for everything else."""
    found = [TuneCandidate("fit", tuple(seed), seed=True, cpu=_computes_on_cpu(seed, space))]
    by_name = {n: c for c in space.cards for n in c.names}
    for devices in _device_sets(space.cards):
        chosen = [by_name[n] for n in devices]
        # over several cards each split mode; the placement check prunes one a backend here cannot run
        splits: list[Level] = [("", ())] if len(devices) == 1 else [("", ()), *((m, ("-sm", m)) for m in SPLITS)]
        capacities = [c.capacity_mib for c in chosen]
        shares: list[Level] = [("", ())]
        if len(devices) > 1 and all(capacities) and len(set(capacities)) > 1:
            shares.append(("ts", ("-ts", ",".join(str(c) for c in capacities))))
        for (split, split_words), (share, share_words), (offload, offload_words) in itertools.product(
            splits, shares, _offload(chosen, space.shape)
        ):
            label = " ".join(p for p in ("+".join(devices), split, share, offload) if p)
            words = ("-dev", ",".join(devices), *split_words, *share_words, *offload_words)
            found.append(TuneCandidate(label, words, cpu=bool(offload)))
    if not space.cards:
        found.append(TuneCandidate("cpu", (), cpu=True))
    return found


def _computes_on_cpu(words: Sequence[str], space: Space) -> bool:
    """Whether a placement leaves layers or experts for the CPU to compute (no card, or -ngl, -ot, -ncmoe)."""
    return (
        not space.cards
        or any(w in words for w in ("-ot", "-ncmoe", "--cpu-moe", "-cmoe"))
        or ("-ngl" in words and words[list(words).index("-ngl") + 1] not in ("-1", "999", "99", "all"))
    )


def factors(space: Space, cpu: bool) -> list[list[Level]]:
    """The later stages, one factor each, every level beside llama.cpp's default (the first, ""): FlashAttention
    forced on and off; with prefill as the objective, a larger micro-batch; where the CPU computes, its threads."""
    found: list[list[Level]] = [[("", ()), ("fa1", ("-fa", "1")), ("fa0", ("-fa", "0"))]]
    if space.objective is Objective.PP:
        found.append([("", ()), (f"ub{UB_PREFILL}", ("-ub", str(UB_PREFILL)))])
    if cpu and space.threads:
        found.append([("", ()), *((f"t{t}", ("-t", str(t))) for t in space.threads)])
    return found


def without(words: Sequence[str], *flags: str) -> tuple[str, ...]:
    """The flags without these (each with its value)."""
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in flags:
            skip = True
        else:
            kept.append(word)
    return tuple(kept)


def without_threads(words: Sequence[str]) -> tuple[str, ...]:
    """The flags without -t N: what decides where each op runs (coverage) is the same at any thread count."""
    return without(words, "-t", "--threads")


def auto_twin(words: Sequence[str]) -> tuple[str, ...] | None:
    """Where these flags force FlashAttention on, the same candidate at llama.cpp's -fa auto (and without -t): the
    two are one configuration wherever auto turns it on, as llama.cpp lays the KV cache out for FlashAttention
    before it resolves auto. Not so for -fa 0: where auto turns it off, the cache keeps that layout."""
    fa = syntax.BY_FLAG["-fa"]
    pairs = itertools.pairwise(words)
    if not any(syntax.BY_FLAG.get(f) is fa and syntax.FLASH_ATTN.get(value) == "on" for f, value in pairs):
        return None
    return without_threads(without(words, *fa.flags))


def varied(incumbent: TuneCandidate, factor: Sequence[Level]) -> list[TuneCandidate]:
    """The incumbent and the incumbent at each other level of one factor (a later stage of the race)."""
    return [incumbent] + [
        TuneCandidate(f"{incumbent.label} {name}", (*incumbent.words, *words), cpu=incumbent.cpu)
        for name, words in factor
        if name
    ]


def grid(space: Space, seed: Sequence[str]) -> list[TuneCandidate]:
    """The whole space: every placement at every level of every factor (what `tune --grid` runs)."""
    found = []
    for placement in placements(space, seed):
        for levels in itertools.product(*factors(space, placement.cpu)):
            label = " ".join(p for p in (placement.label, *(name for name, _ in levels)) if p)
            words = (*placement.words, *(w for _, flags in levels for w in flags))
            found.append(TuneCandidate(label, words, placement.seed and not any(n for n, _ in levels), placement.cpu))
    return found
