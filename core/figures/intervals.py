"""Confidence intervals over repeated runs: a figure's mean with a 95 % Student-t
interval over its n repeats, and Welch's interval for the difference of two such means
(two repeated sets compared). Pure; no scipy: the t quantile is a table for small
degrees of freedom and the Cornish-Fisher expansion beyond it (within 0.001 of the
exact value from 30 degrees of freedom on).

Used by `rampwatch run --repeats` (``app.repeats``), a sweep's ``repeats:``
(``sweep.combine_runs``) and `rampwatch compare` of two repeated sets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95

# t(0.975, df) for df = 1..30 (Student's t table, 3 decimals).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959963984540054


def t_quantile_975(df: float) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (the half-width
    factor of a two-sided 95 % interval): the table for whole df up to 30 (a fractional
    df, as Welch's gives, interpolated between its neighbours), the Cornish-Fisher series
    beyond, 1.960 as df grows without bound."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be above 0, got {df}")
    if math.isinf(df):
        return _Z975
    if df <= len(_T975):
        lo = max(1, math.floor(df))
        hi = min(len(_T975), lo + 1)
        if df <= 1:
            return _T975[0]
        frac = df - lo
        return _T975[lo - 1] + (_T975[hi - 1] - _T975[lo - 1]) * frac
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


@dataclass(frozen=True)
class MeanInterval:
    """A figure over n repeats: its mean and the half-width of its 95 % interval (None
    for one repeat: one value has no spread to judge), and the values themselves."""

    mean: float
    half_width: float | None
    n: int
    values: tuple[float, ...]

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    def contains(self, value: float) -> bool:
        return self.half_width is not None and self.mean - self.half_width <= value <= self.mean + self.half_width

    def to_dict(self) -> dict[str, object]:
        return {"mean": self.mean, "ci95_half_width": self.half_width, "n": self.n, "values": list(self.values)}

    def text(self, digits: int = 1) -> str:
        """``12.3 ± 0.4`` (n=1: the value alone)."""
        mean = f"{self.mean:.{digits}f}"
        return mean if self.half_width is None else f"{mean} ± {self.half_width:.{digits}f}"


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def sample_variance(values: Sequence[float]) -> float:
    """The unbiased (n − 1) variance; 0.0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return sum((v - mean) * (v - mean) for v in values) / (
        n - 1
    )  # a product: inf past float's range, never OverflowError


def mean_interval(values: Sequence[float | None]) -> MeanInterval | None:
    """The mean of the finite values and its 95 % Student-t interval (n − 1 degrees of
    freedom); None when none is finite, no interval for one."""
    xs = _finite(values)
    if not xs:
        return None
    n = len(xs)
    mean = sum(xs) / n
    if n == 1:
        return MeanInterval(mean, None, 1, tuple(xs))
    half = t_quantile_975(n - 1) * math.sqrt(sample_variance(xs) / n)
    return MeanInterval(mean, half, n, tuple(xs))


@dataclass(frozen=True)
class DifferenceInterval:
    """B − A of two sets' means with Welch's 95 % interval (None when either set has one
    value), and the Welch-Satterthwaite degrees of freedom."""

    delta: float
    low: float | None
    high: float | None
    df: float | None

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


def welch_interval(a: Sequence[float | None], b: Sequence[float | None]) -> DifferenceInterval | None:
    """Welch's 95 % interval for mean(b) − mean(a), not assuming equal variances; None
    when a set has no finite value, no bounds when either has only one (no variance to
    estimate). Two sets with no spread at all give the difference itself as both bounds."""
    xa, xb = _finite(a), _finite(b)
    if not xa or not xb:
        return None
    delta = sum(xb) / len(xb) - sum(xa) / len(xa)
    if len(xa) < 2 or len(xb) < 2:
        return DifferenceInterval(delta, None, None, None)
    va, vb = sample_variance(xa) / len(xa), sample_variance(xb) / len(xb)
    se2 = va + vb
    if se2 == 0:
        return DifferenceInterval(delta, delta, delta, math.inf)
    denominator = (va * va / (len(xa) - 1) if va else 0.0) + (vb * vb / (len(xb) - 1) if vb else 0.0)
    if not math.isfinite(se2) or not math.isfinite(denominator):  # figures past float's range
        return DifferenceInterval(delta, None, None, None)
    df = se2 * se2 / denominator if denominator > 0 else math.inf  # variances too small to square
    half = t_quantile_975(df) * math.sqrt(se2)
    return DifferenceInterval(delta, delta - half, delta + half, df)


def intervals_overlap(a: MeanInterval, b: MeanInterval) -> bool:
    """Whether two intervals share a point (a figure without an interval is its value)."""
    a_lo, a_hi = (a.low, a.high) if a.half_width is not None else (a.mean, a.mean)
    b_lo, b_hi = (b.low, b.high) if b.half_width is not None else (b.mean, b.mean)
    assert a_lo is not None and a_hi is not None and b_lo is not None and b_hi is not None
    return a_lo <= b_hi and b_lo <= a_hi
