"""Is B's figure different from A's beyond noise? A bootstrap interval for B − A.

Each run's values are resampled by *group*, with replacement, each run on its own: a
group is what varies together. A request's TTFT is its own group, and so is one second's
completions; the ITLs of one request (the gaps between its chunks) form one group, since
a slow request makes all of its gaps slow — resampling gaps one by one would make the
interval far too narrow. A resample draws as many groups as the run has and computes the
statistic over the values of the drawn groups (a group drawn twice counts twice). The
interval is the central ``confidence`` share of the resampled differences (the percentile
bootstrap); B differs from A only when the interval excludes 0.

Pure numpy and seeded: the same inputs give the same interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
# Past this many values a run's samples are thinned (whole groups, at random, seeded):
# the interval barely narrows beyond it and each resample costs time in proportion.
MAX_VALUES = 50_000
# Fewer groups than this in either run: no interval (too few to say anything about noise).
MIN_GROUPS = 5
# A difference outside noise but smaller than this share of A's figure is "negligible":
# with tens of thousands of requests a 0.01 ms change is outside noise and means nothing.
NEGLIGIBLE_FRACTION = 0.01
# Resamples are computed in batches of at most this many weights (memory: 8 bytes each).
BATCH_CELLS = 4_000_000


@dataclass(frozen=True)
class Samples:
    """One run's values of a metric, sorted, each with its group (``None``: every value is
    its own group)."""

    values: np.ndarray
    groups: np.ndarray | None
    n_groups: int

    @classmethod
    def of(cls, values: np.ndarray | list[float], groups: np.ndarray | None = None) -> Samples:
        """Samples of ``values`` (NaN dropped); ``groups`` labels each value's group."""
        v = np.asarray(values, dtype=np.float64)
        keep = ~np.isnan(v)
        v = v[keep]
        order = np.argsort(v, kind="stable")
        if groups is None:
            return cls(v[order], None, int(v.size))
        labels, numbered = np.unique(np.asarray(groups)[keep], return_inverse=True)
        return cls(v[order], numbered[order].astype(np.int64), int(labels.size))

    def __len__(self) -> int:
        return int(self.values.size)

    def thinned(self, max_values: int, rng: np.random.Generator) -> Samples:
        """At most about ``max_values`` values: a random share of the groups, whole."""
        if self.values.size <= max_values:
            return self
        keep_groups = max(MIN_GROUPS, int(self.n_groups * max_values / self.values.size))
        chosen = np.zeros(self.n_groups, dtype=bool)
        chosen[rng.choice(self.n_groups, size=min(keep_groups, self.n_groups), replace=False)] = True
        if self.groups is None:
            return Samples.of(self.values[chosen])
        keep = chosen[self.groups]
        return Samples.of(self.values[keep], self.groups[keep])


def weighted_statistics(values: np.ndarray, weights: np.ndarray, statistic: str) -> np.ndarray:
    """``statistic`` ("mean", or a percentile "p50", "p99", "p99.9"…) of sorted ``values``
    once per row of ``weights`` (rows × values), value i counting ``weights[row, i]``
    times. A percentile is the smallest value with at least that share of the row's
    weight at or below it. A row without weight gives NaN."""
    weights = np.asarray(weights)
    totals = weights.sum(axis=1).astype(np.float64)
    empty = totals <= 0
    if statistic == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (weights.astype(np.float64) @ values) / totals  # a float matrix: BLAS does it
    else:
        if not statistic.startswith("p"):
            raise ValueError(f"unknown statistic {statistic!r}: 'mean' or 'p<N>'")
        q = float(statistic[1:]) / 100.0
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"percentile {statistic!r} outside 0…100")
        if values.size == 0:
            return np.full(len(totals), math.nan)
        cumulative = np.cumsum(weights, axis=1)
        below = (cumulative < (q * totals * (1 - 1e-12))[:, None]).sum(axis=1)
        out = values[np.minimum(below, values.size - 1)]
    return np.where(empty, math.nan, out)


def weighted_statistic(values: np.ndarray, weights: np.ndarray, statistic: str) -> float:
    """``weighted_statistics`` for one set of weights."""
    return float(weighted_statistics(values, np.asarray(weights)[None, :], statistic)[0])


def statistic_of(samples: Samples, statistic: str) -> float:
    """The statistic of the samples as they are (every value once)."""
    if len(samples) == 0:
        return math.nan
    return weighted_statistic(samples.values, np.ones(samples.values.size), statistic)


def _resampled(samples: Samples, statistic: str, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """The statistic of ``resamples`` resamples of the groups, in batches."""
    groups = samples.n_groups
    batch = max(1, min(resamples, BATCH_CELLS // max(samples.values.size, groups, 1)))
    out = []
    for start in range(0, resamples, batch):
        rows = min(batch, resamples - start)
        draws = rng.integers(0, groups, (rows, groups)) + (np.arange(rows) * groups)[:, None]
        counts = np.bincount(draws.ravel(), minlength=rows * groups).reshape(rows, groups)
        weights = counts if samples.groups is None else counts[:, samples.groups]
        out.append(weighted_statistics(samples.values, weights, statistic))
    return np.concatenate(out)


@dataclass(frozen=True)
class Delta:
    """B − A for one statistic: the two figures, their difference and its interval
    (NaN when either run has too few samples)."""

    a: float
    b: float
    delta: float
    low: float
    high: float
    confidence: float = DEFAULT_CONFIDENCE

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def verdict(self, higher_is_better: bool) -> str:
        """B against A: "better" / "worse" only when the interval excludes 0 and the change
        is at least ``NEGLIGIBLE_FRACTION`` of A's figure ("negligible" when it is smaller);
        otherwise "within noise", or "too few samples" when there is no interval."""
        if not self.has_interval:
            return "too few samples"
        if self.low <= 0 <= self.high:
            return "within noise"
        if abs(self.delta) < NEGLIGIBLE_FRACTION * abs(self.a):
            return "negligible"
        if self.low > 0:
            return "better" if higher_is_better else "worse"
        return "worse" if higher_is_better else "better"


def bootstrap_delta(
    a: Samples,
    b: Samples,
    statistic: str,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    max_values: int = MAX_VALUES,
) -> Delta:
    """``statistic`` of B minus that of A, with a ``confidence`` bootstrap interval."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence}: must be between 0 and 1")
    va, vb = statistic_of(a, statistic), statistic_of(b, statistic)
    delta = vb - va
    if min(a.n_groups, b.n_groups) < MIN_GROUPS or resamples < 1:
        return Delta(va, vb, delta, math.nan, math.nan, confidence)
    rng = np.random.default_rng(seed)
    ta, tb = a.thinned(max_values, rng), b.thinned(max_values, rng)
    differences = _resampled(tb, statistic, rng, resamples) - _resampled(ta, statistic, rng, resamples)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(differences, [tail, 100.0 - tail])
    return Delta(va, vb, delta, float(low), float(high), confidence)
