"""The numbers of a comparison, honestly: every sample kept, median and spread, a CV warning, and ratios with a 95 %
confidence interval (Welch's t on log throughput, so a ratio's interval is symmetric in the log and needs no equal
variances). A ratio whose interval holds 1 is no difference. Pure; the standard library only."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from enum import Enum
from typing import NamedTuple

CV_WARN = 0.05  # a coefficient of variation above this is warned about: the result moves more than 5 % run to run

# Student's t, two-sided 95 % (the 0.975 quantile) by degrees of freedom; between rows the lower df is used, which
# widens the interval (never narrows it).
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
    11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
    21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042,
    40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: float) -> float:
    if df >= 1000:
        return 1.960
    usable = [k for k in _T975 if k <= max(df, 1)]
    return _T975[max(usable)]


class SampleSummary(NamedTuple):
    n: int
    median: float | None
    mean: float | None
    stdev: float | None
    cv: float | None
    outliers: int  # samples beyond 1.5 IQR of the quartiles

    @property
    def noisy(self) -> bool:
        return self.cv is not None and self.cv > CV_WARN

    def to_json(self) -> dict[str, object]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self._asdict().items()}


def summarize(values: Sequence[float]) -> SampleSummary:
    if not values:
        return SampleSummary(0, None, None, None, None, 0)
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values) if len(values) > 1 else None
    outliers = 0
    if len(values) >= 4:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        spread = 1.5 * (q3 - q1)
        outliers = sum(v < q1 - spread or v > q3 + spread for v in values)
    cv = stdev / mean if stdev is not None and mean else None
    return SampleSummary(len(values), statistics.median(values), mean, stdev, cv, outliers)


def geomean(values: Sequence[float]) -> float:
    """Of positive throughputs: the mean a ratio of them is taken on."""
    return math.exp(statistics.fmean(math.log(v) for v in values))


class Ratio(NamedTuple):
    """`other` over `base`: the ratio of geometric means, with its 95 % interval (None: too few samples)."""

    value: float
    low: float | None
    high: float | None

    @property
    def within_noise(self) -> bool:
        return self.low is None or self.high is None or self.low <= 1.0 <= self.high

    def text(self) -> str:
        interval = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None and self.high is not None else ""
        return f"{self.value:.2f}×{interval}"

    def rounded(self) -> Ratio:
        """To the four places JSON states it with (tables show what the JSON says)."""
        low, high = (
            (round(self.low, 4), round(self.high, 4))
            if self.low is not None and self.high is not None
            else (None, None)
        )
        return Ratio(round(self.value, 4), low, high)

    def to_json(self) -> dict[str, object]:
        shown = self.rounded()
        return {
            "ratio": shown.value,
            "ci95": [shown.low, shown.high] if shown.low is not None and shown.high is not None else None,
            "within_noise": self.within_noise,
        }


def ratio(base: Sequence[float], other: Sequence[float]) -> Ratio | None:
    if not base or not other or min(*base, *other) <= 0:
        return None
    a, b = [math.log(v) for v in base], [math.log(v) for v in other]
    diff = statistics.fmean(b) - statistics.fmean(a)
    if len(a) < 2 or len(b) < 2:
        return Ratio(math.exp(diff), None, None)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Ratio(math.exp(diff), math.exp(diff), math.exp(diff))
    df = (va + vb) ** 2 / ((va**2 / (len(a) - 1) if va else 0) + (vb**2 / (len(b) - 1) if vb else 0))
    half = t975(df) * se
    return Ratio(math.exp(diff), math.exp(diff - half), math.exp(diff + half))


class RatioVerdict(Enum):
    """What a ratio and its interval let one say; the undecided ones worded once, in `said`, wherever they are told
    (bench's verdicts and tables, tune's reasons and its line against llama.cpp's fit)."""

    NO_SAMPLES = "no samples"  # nothing to take a ratio of
    ONE_RUN = "one run"  # a ratio of one process each: no interval
    NOISE = "noise"  # the interval holds 1
    APART = "apart"  # the interval is wholly above or below 1

    @classmethod
    def of(cls, found: Ratio | None) -> RatioVerdict:
        if found is None:
            return cls.NO_SAMPLES
        if found.low is None or found.high is None:
            return cls.ONE_RUN
        return cls.NOISE if found.low <= 1.0 <= found.high else cls.APART

    @property
    def said(self) -> str:
        return _SAID[self]


_SAID = {
    RatioVerdict.NO_SAMPLES: "too few samples to compare",
    RatioVerdict.ONE_RUN: "too few runs to tell",
    RatioVerdict.NOISE: "inside the noise",
    RatioVerdict.APART: "apart",
}


def compared(ratio_: Ratio | None, winner: str, other: str) -> str:
    """'A is 1.16× [1.10, 1.22] B', or that they cannot be told apart."""
    verdict = RatioVerdict.of(ratio_)
    if ratio_ is None:
        return f"{winner} and {other}: {verdict.said}"
    if verdict is RatioVerdict.ONE_RUN:
        return f"{winner} ahead of {other} by {ratio_.text()} in one run each: {verdict.said}"
    if verdict is RatioVerdict.NOISE:
        return f"cannot tell {winner} from {other} ({ratio_.text()}: {verdict.said})"
    return f"{winner} wins by {ratio_.text()} over {other}"
