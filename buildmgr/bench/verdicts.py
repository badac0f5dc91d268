"""The verdicts of a bench call, per test and depth: which CONFIG wins and by how much, whether each split beats the
best single device, what was partial and what environment bench set; one statistic ranks and compares. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from buildmgr.bench.judge import Validity
from buildmgr.bench.rows import RANKED, Row, field_of, share_text, test_name, units
from buildmgr.bench.stats import RatioVerdict, compared, geomean, ratio

# What the only environment bench sets is for: said beside every number of a CONFIG it was set for.
PINNING_GUARD = (
    "bench's pinning guard for CPU-override CONFIGs (page-locked host memory cannot be swapped, and has starved shared"
    " hosts); llama.cpp run by hand page-locks, which can be faster: --allow-pinned measures that"
)


def verdicts(rows: Sequence[Row], devices_of: dict[str, int]) -> list[str]:
    """Per test at each depth: which CONFIG wins and by how much over the next; and for every split (a CONFIG over
    more than one device), whether it beats the best single device of this host at the same depth, by the rule
    operators of mixed hosts go by: a split that does not is not worth its failure modes. One statistic ranks and
    compares (the geometric mean over processes, the unit of repetition); a difference inside the noise is "cannot
    tell", and a winner that is partial or unproven says so beside its name."""
    models = {field_of(r, "model_filename") for r in rows}
    by_test: dict[str, list[Row]] = {}
    for row in rows:
        model = f" [{field_of(row, 'model_filename')}]" if len(models) > 1 else ""
        by_test.setdefault(test_name(row.fields) + model, []).append(row)
    lines = []
    for test, members in by_test.items():
        usable = [r for r in members if r.validity in RANKED and units(r)]
        ranked = sorted(usable, key=lambda r: geomean(units(r)), reverse=True)
        named = {r.config: r.config + r.env_tag + _tag(r) for r in ranked}
        if not ranked:
            lines.append(f"{test}: no configuration gave a usable result")
            continue
        if len(ranked) == 1 and len({r.config for r in members}) == 1:
            pass  # one CONFIG alone: nothing was compared, and nothing failed
        elif len(ranked) == 1:
            lines.append(f"{test}: only {named[ranked[0].config]} gave a usable result")
        else:
            lines.append(
                f"{test}: "
                + compared(ratio(units(ranked[1]), units(ranked[0])), named[ranked[0].config], named[ranked[1].config])
                + _limits(ranked[0], ranked[1])
            )
        singles = [r for r in ranked if devices_of.get(r.config) == 1]
        for split in (r for r in ranked if devices_of.get(r.config, 0) > 1):
            name = named[split.config]
            if not singles:
                lines.append(f"{test}: split {name}: no single-device configuration was measured to compare with")
                continue
            best = singles[0]
            r = ratio(units(best), units(split))
            against = f"the best single device {named[best.config]}"
            verdict = RatioVerdict.of(r)
            if r is None:
                lines.append(f"{test}: split {name} against {against}: {verdict.said}")
            elif verdict is RatioVerdict.ONE_RUN:
                lines.append(f"{test}: split {name} against {against}: {r.text()} in one run each: {verdict.said}")
            elif verdict is RatioVerdict.NOISE:
                lines.append(f"{test}: split {name} cannot be told from {against} ({r.text()}: {verdict.said})")
            elif r.value > 1:
                lines.append(f"{test}: split {name} beats {against} by {r.text()}")
            else:
                lines.append(f"{test}: split {name} is not worth it: {r.text()} of {against}")
    partial = {r.config: r.partial for r in rows if r.partial}
    lines += [f"{config} is partial: {line}" for config, line in partial.items()]
    ran = [r for r in rows if r.validity not in (Validity.NOT_RUN, Validity.FAILED)]
    guarded = {r.config: r.env_tag.strip(" []") for r in ran if r.env_tag}
    lines += [f"{config} ran with {env}: {PINNING_GUARD}" for config, env in guarded.items()]
    return lines


def _limits(first: Row, second: Row) -> str:
    """Where a decode's two are against their bandwidth limits: how much either could still gain."""
    shares = [r.meta.limit_percent for r in (first, second) if r.meta is not None and r.meta.limit_percent is not None]
    if len(shares) < 2:
        return ""
    return f"; at {share_text(shares[0])} and {share_text(shares[1])} of their bandwidth limits"


def _tag(row: Row) -> str:
    """Beside a ranked CONFIG's name: what keeps its number from being the device's alone, or from being proven."""
    return {Validity.PARTIAL: " (partial)", Validity.UNPROVEN: " (unproven)"}.get(row.validity or Validity.VALID, "")
