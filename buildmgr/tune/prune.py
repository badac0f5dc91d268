"""Which candidates of a stage are left to race, and why each other is not: the placement check's certain failure,
the same configuration as one already there (-fa 1 where llama.cpp's auto turns FlashAttention on), llama.cpp's
estimate of its memory past what a device may hold, or ops the CPU would run for a device (coverage, taken once per
flags that can move an op)."""

from __future__ import annotations

from collections.abc import Sequence

from buildmgr.bench import config as bench_config
from buildmgr.bench.prepare import Planned
from buildmgr.bench.runner import cover
from buildmgr.placement.cover import Covered
from buildmgr.tune import oracle, space
from buildmgr.tune.result import RaceEntry
from buildmgr.tune.tuning import Tuning

TWIN = "the same as without -fa 1: llama.cpp's -fa auto turns FlashAttention on here (the same KV cache and kernels)"


def prune(
    tuning: Tuning,
    entries: Sequence[RaceEntry],
    planned: Sequence[Planned],
    bench_request: bench_config.BenchRequest,
) -> dict[str, tuple[RaceEntry, Planned, Covered]]:
    """Those left to race, each with its plan, coverage (said, or that it could not be taken) and the environment
    its runs get; the others' entries say why not. Coverage already taken (`tuning.covered`, by the flags without -t
    (threads move no op: a candidate that differs only in them is not run again for it)."""
    request, tool, ctx, capacity = tuning.request, tuning.tool, tuning.ctx, tuning.capacity
    environ, say, taken = tuning.environ, tuning.say, tuning.covered
    live: dict[str, tuple[RaceEntry, Planned, Covered]] = {}
    for entry, p in zip(entries, planned, strict=True):
        if p.blocked is not None:
            entry.reason = f"the placement check: {p.blocked.line()}"
            continue
        twin = space.auto_twin(entry.candidate.words)
        known = taken.get(twin) if twin is not None else None
        if known is not None and known.coverage is not None and known.coverage.flash_attn_auto:
            entry.reason = TWIN
            continue
        try:
            entry.need = oracle.need(tool, request.model, ctx, entry.candidate.words, environ)
        except oracle.FitFailed as err:
            entry.reason = f"llama.cpp could not estimate its memory: {err}"
            continue
        short = oracle.short(entry.need, capacity, space.FIT_MARGIN_MIB)
        if short:
            entry.reason = "does not fit: " + "; ".join(short)
            continue
        key = space.without_threads(entry.candidate.words)
        if key in taken:
            say(f"  {entry.candidate.label}: coverage as taken without -t (threads move no op)")
        covered = taken.get(key) or taken.setdefault(key, cover(p, bench_request, environ, say))
        partial = covered.coverage.partial if covered.coverage is not None else None
        if partial:
            entry.reason = f"falls back: {partial}"
            continue
        entry.env = dict(p.env_set)
        live[entry.candidate.label] = (entry, p, covered)
    return live
