"""Which of a repository's artifacts fits this host, ranked, with the reason for each: native code for every GPU
here first, then code the driver must JIT-compile (warned), then a portable GPU backend (Vulkan), then the CPU;
among equals, the newest build. Pure: the host's findings for each artifact and its GPUs come in as data."""

from __future__ import annotations

import dataclasses
import enum
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from buildmgr import backends
from buildmgr.artifacts.index import Entry
from buildmgr.core.errors import UserError
from buildmgr.core.findings import Finding, Severity


class Tier(enum.IntEnum):
    NATIVE = 0  # machine code for every GPU here that its GPU backend serves
    JIT = 1  # PTX the driver compiles at first use: it runs, with a slow first start
    PORTABLE = 2  # a GPU backend with no compiled GPU code (Vulkan, SYCL …): any device of it
    CPU = 3  # no GPU backend

    @property
    def text(self) -> str:
        return {0: "native GPU code", 1: "GPU code by JIT", 2: "portable GPU backend", 3: "CPU only"}[self.value]


@dataclass(frozen=True)
class Candidate:
    entry: Entry
    tier: Tier | None  # None: it does not fit this host
    reasons: tuple[str, ...]  # why not (the errors), or what to know of it (the warnings, the tier's basis)
    proves: tuple[str, ...]  # the backends it was picked for: the installed build must see a device of each
    findings: tuple[Finding, ...] = ()  # the host's, for its summary: install's warnings once its receipt is read
    vouched_by: str | None = None  # the key that vouches for it here (None: unsigned, or it does not fit)
    above_next: str | None = None  # which rank key put it above the next fitting one (None: the last of them)

    @property
    def fits(self) -> bool:
        return self.tier is not None


def _cpu_side(name: str) -> bool:
    return name in backends.NOT_A_CARD


def judge(
    entry: Entry, findings: Sequence[Finding], targets: Mapping[str, list[str]], untrusted: str | None = None
) -> Candidate:
    """One artifact against this host: `findings` are compat's for its summary, `targets` the GPUs here by backend,
    `untrusted` why its signature does not let it in (None: signed by a trusted key, or --allow-unsigned)."""
    summary = entry.summary
    blocking = [f.text() for f in findings if f.severity is Severity.ERROR]
    if untrusted is not None:
        blocking.append(untrusted)
    warned = [f.text() for f in findings if f.severity is not Severity.ERROR]
    coded = {name for name, _ in backends.device_codes()}
    gpu = [b for b in summary.backends if not _cpu_side(b)]
    served = []
    for name in gpu:
        if name not in coded:
            continue
        here = targets.get(name, [])
        codes = ", ".join(summary.runtime.device_code.get(name, ())) or "no GPU code"
        if here:
            served.append(name)
        elif summary.dl:
            warned.append(f"its {name} module ({codes}) finds no GPU here: it will not be used")
        else:
            blocking.append(f"built for {name} GPUs ({codes}), and none is visible here: it would run on the CPU")
    if blocking:
        return Candidate(entry, None, tuple(blocking), (), tuple(findings))
    portable = [b for b in gpu if b not in coded]
    fits = backends.code_fits(summary.runtime.device_code, targets)
    jit = any(f.severity is Severity.WARNING for name in served for f in fits.get(name, []))
    if served:
        tier = Tier.JIT if jit else Tier.NATIVE
        basis = "; ".join(f"{name}: {', '.join(targets[name])}" for name in served)
        reasons = (f"{tier.text} for every GPU here ({basis})", *warned)
        return Candidate(entry, tier, reasons, tuple(served), tuple(findings))
    if portable:
        reasons = (f"{Tier.PORTABLE.text} ({', '.join(portable)}): the installed build must see a device", *warned)
        return Candidate(entry, Tier.PORTABLE, reasons, tuple(portable), tuple(findings))
    # the CPU is no device of the probe's: the smoke run, which ran llama-bench on it, is its proof
    return Candidate(entry, Tier.CPU, ("no GPU backend: the smoke run proves it", *warned), (), tuple(findings))


def rank(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Fitting ones best first (tier, then the newest build number, then the latest finish), then the others; each
    fitting one says which of those keys put it above the next."""
    fitting = sorted(
        (c for c in candidates if c.tier is not None), key=lambda c: c.entry.summary.finished, reverse=True
    )
    fitting.sort(key=lambda c: (c.tier, -c.entry.summary.build_number))  # stable: the latest first among equals
    told = [dataclasses.replace(c, above_next=_above(c, after)) for c, after in itertools.pairwise(fitting)]
    return [*told, *fitting[len(told) :], *(c for c in candidates if c.tier is None)]


def _above(first: Candidate, second: Candidate) -> str:
    """The rank key that decided between two fitting candidates, in words."""
    a, b = first.entry.summary, second.entry.summary
    assert first.tier is not None and second.tier is not None
    if first.tier != second.tier:
        return f"{first.tier.text} ranks above {second.tier.text}"
    if a.build_number != b.build_number:
        return f"same tier; a newer build, b{a.build_number} against b{b.build_number}"
    if a.finished != b.finished:
        return f"same tier and build number; finished later, {a.finished} against {b.finished}"
    return "same tier, build number and finish: the repository's order (by name, then digest)"


def wanted(entries: Sequence[Entry], what: str | None) -> list[Entry]:
    """The entries `install [RECIPE|BUILD_NUMBER|BUILD_ID]` asks for; a name that matches nothing is a user error.
    A build id (`cpu-a707a459`) picks one build among archives of one name."""
    if what is None:
        chosen = list(entries)
    elif any(e.summary.id == what for e in entries):
        chosen = [e for e in entries if e.summary.id == what]
    elif what.isascii() and (what.isdigit() or (what[:1] == "b" and what[1:].isdigit())):
        number = int(what.lstrip("b"))
        chosen = [e for e in entries if e.summary.build_number == number]
        if not chosen:
            numbers = sorted({e.summary.build_number for e in entries})
            raise UserError(f"no build b{number} in this repository (it has {', '.join(f'b{n}' for n in numbers)})")
    else:
        chosen = [e for e in entries if e.summary.recipe == what]
        if not chosen:
            recipes = sorted({e.summary.recipe for e in entries})
            ids = sorted({e.summary.id for e in entries})
            raise UserError(
                f"no {what!r} artifact in this repository (it has {', '.join(recipes) or 'none'}"
                + (f"; builds {', '.join(ids)})" if ids else ")")
            )
    return chosen
