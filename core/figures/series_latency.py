"""The windowed latency percentiles of ``series.SeriesBuilder``.

TTFT / ITL (and, for a mixture's class, E2E) p50/p90/p99 over the requests that ended OK
in the last ``window_s`` seconds, from one log histogram per metric and second of
completion (values within ~1% of exact). A second's value is frozen ``grace_s`` after the
second ends; a record arriving later still counts in the run summary but not in that
frozen value.
"""

from __future__ import annotations

import math

import numpy as np

from rampwatch.core.figures.series_bins import Growable
from rampwatch.core.figures.stats import LogHistogram
from rampwatch.core.figures.summary import RequestBlock

QS = (0.5, 0.9, 0.99)
# The windowed percentiles, one histogram per metric and second of completion. E2E latency
# is drawn per class only (``CLASS_SERIES_NAMES``): a class builder keeps its histograms
# (``e2e_latency``), the run's own builder does not spend its event loop and checkpoints on them.
RUN_HIST_METRICS = ("ttft", "itl")
CLASS_HIST_METRICS = (*RUN_HIST_METRICS, "e2el")


def latency_series(metrics: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{metric}_{q}" for metric in metrics for q in ("p50", "p90", "p99"))


class LatencyWindows:
    """Per-second histograms, the frozen percentiles and the seconds frozen so far."""

    def __init__(self, window_s: int, grace_s: float, metrics: tuple[str, ...]) -> None:
        self.window_s = window_s
        self.grace_s = grace_s
        self.metrics = metrics
        self.names = latency_series(metrics)
        self.hists: dict[int, tuple[LogHistogram, ...]] = {}  # one per metric
        self.final = {name: Growable(math.nan) for name in self.names}
        self.final_upto = 0  # seconds below this are frozen
        self.newly_final: list[int] = []

    def add_block(self, end: int, block: RequestBlock, ok: np.ndarray) -> None:
        """A block of requests that ended in second ``end`` (``ok``: which succeeded)."""
        if not ok.any():
            return
        hists = self.hists.get(end)
        if hists is None:
            hists = self.hists[end] = tuple(LogHistogram() for _ in self.metrics)
        first = block.first_token_at[ok]
        ttft = first - block.sent_at[ok]
        hists[0].add(ttft[~np.isnan(first)])
        hists[1].add(block.itls)
        if len(hists) > 2:  # E2E (a class builder)
            hists[2].add(block.end_at[ok] - block.sent_at[ok])

    def last_due(self, now: float) -> int:
        """The last second to be frozen at ``now``."""
        return math.floor(now - 1.0 - self.grace_s)

    def freeze_upto(self, last: int) -> None:
        while self.final_upto <= last:
            self._freeze(self.final_upto)
            self.final_upto += 1

    def _window_hists(self, b: int) -> list[LogHistogram]:
        parts = [self.hists[i] for i in range(b - self.window_s + 1, b + 1) if i in self.hists]
        return [LogHistogram.sum(p[j] for p in parts) for j in range(len(self.metrics))]

    def _latency_at(self, b: int) -> list[float]:
        return [q for hist in self._window_hists(b) for q in hist.quantiles(QS)]

    def _freeze(self, b: int) -> None:
        for name, value in zip(self.names, self._latency_at(b)):
            self.final[name].set(b, value)
        for old in [i for i in self.hists if i <= b - self.window_s + 1]:
            del self.hists[old]
        self.newly_final.append(b)

    def take_newly_final(self) -> list[int]:
        seconds, self.newly_final = self.newly_final, []
        return seconds

    def arrays(self, n: int, out: dict[str, np.ndarray], unfrozen: bool = True) -> None:
        """The first ``n`` seconds of every percentile into ``out``; without ``unfrozen``,
        those of the seconds not frozen yet are left NaN (their windows are most of the
        cost, and a reader of frozen seconds only, the knee's, need not pay it)."""
        for name in self.names:
            out[name] = self.final[name].head(n).copy()
        for b in range(min(self.final_upto, n), n if unfrozen else 0):
            for name, value in zip(self.names, self._latency_at(b)):
                out[name][b] = value
