"""A reasoning run's one-second series, beside ``series.SeriesBuilder``'s own.

Time to first answer p50/p90/p99 over the requests that ended OK in the last
``window_s`` seconds (``series_latency.LatencyWindows``'s windows and freezing, TTFA in
place of TTFT), and the reasoning share of output tokens over the same window (the
thinking tokens of the requests that ended in it over their output tokens), in %.

``SeriesBuilder`` makes one on the first request that reasoned: a plain run has none,
and its snapshots, checkpoints and screens stay as they were (``Snapshot.reasoning`` is
None). Requests before that first one are not in these series (their TTFA was their
TTFT, which the run's own series show).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rampwatch.core.figures import stats
from rampwatch.core.figures.series_bins import Growable
from rampwatch.core.figures.series_latency import LatencyWindows
from rampwatch.core.figures.stats import LogHistogram
from rampwatch.core.figures.summary import RequestBlock

TTFA_SERIES = ("ttfa_p50", "ttfa_p90", "ttfa_p99")
SHARE_SERIES = "reasoning_share_pct"
REASONING_SERIES = (*TTFA_SERIES, SHARE_SERIES)


class TtfaWindows(LatencyWindows):
    """``LatencyWindows`` of one metric, the time to first answer."""

    def __init__(self, window_s: int, grace_s: float) -> None:
        super().__init__(window_s, grace_s, ("ttfa",))

    def add_block(self, end: int, block: RequestBlock, ok: np.ndarray) -> None:
        if not ok.any():
            return
        hists = self.hists.get(end)
        if hists is None:
            hists = self.hists[end] = (LogHistogram(),)
        if block.reasoning is None:  # none of them reasoned: the TTFT is the TTFA
            first = block.first_token_at[ok]
            hists[0].add((first - block.sent_at[ok])[~np.isnan(first)])
        else:
            ttfa = block.reasoning.ttfa_s
            hists[0].add(ttfa[~np.isnan(ttfa)])


class ReasoningSeries:
    """TTFA percentiles and the reasoning share, per second of completion."""

    def __init__(self, window_s: int, grace_s: float) -> None:
        self.window_s = window_s
        self.latency = TtfaWindows(window_s, grace_s)
        self.reasoning_tokens = Growable(0.0)
        self.output_tokens = Growable(0.0)

    def add_block(self, end: int, block: RequestBlock, ok: np.ndarray) -> None:
        """A block of requests that ended in second ``end`` (``ok``: which succeeded)."""
        self.latency.add_block(end, block, ok)
        if not ok.any():
            return
        self.output_tokens.add(end, float(stats.output_lens(block.completion_tokens[ok]).sum()))
        if block.reasoning is not None:
            self.reasoning_tokens.add(end, float(block.reasoning.reasoning_tokens))

    def freeze_upto(self, last: int) -> None:
        """Freeze the seconds up to ``last`` (the run's own windows say which are due)."""
        self.latency.freeze_upto(last)
        self.latency.newly_final.clear()  # the knee reads the run's own seconds, not these

    def arrays(self, n: int, out: dict[str, np.ndarray], unfrozen: bool = True) -> None:
        """The first ``n`` seconds of each of ``REASONING_SERIES`` into ``out``."""
        self.latency.arrays(n, out, unfrozen)
        out[SHARE_SERIES] = windowed_share_pct(self.reasoning_tokens.head(n), self.output_tokens.head(n), self.window_s)

    # -- checkpoints ----------------------------------------------------------------
    def export_state(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        latency = self.latency
        seconds = sorted(latency.hists)
        if seconds:
            arrays["reasoning.hists"] = np.stack([latency.hists[s][0].counts for s in seconds])
        for name, g in latency.final.items():
            arrays[f"reasoning.final.{name}"] = g.data
        arrays["reasoning.reasoning_tokens"] = self.reasoning_tokens.data
        arrays["reasoning.output_tokens"] = self.output_tokens.data
        return {
            "hist_seconds": seconds,
            "hist_totals": [latency.hists[s][0].total for s in seconds],
            "final_upto": latency.final_upto,
            "newly_final": list(latency.newly_final),
        }

    @classmethod
    def restore_state(
        cls, window_s: int, grace_s: float, state: dict[str, Any], arrays: dict[str, np.ndarray]
    ) -> ReasoningSeries:
        series = cls(window_s, grace_s)
        latency = series.latency
        for k, (second, total) in enumerate(zip(state["hist_seconds"], state["hist_totals"])):
            hist = LogHistogram()
            hist._counts = np.array(arrays["reasoning.hists"][k], dtype=np.int64)
            hist.total = total
            latency.hists[second] = (hist,)
        latency.final = {name: Growable.of(math.nan, arrays[f"reasoning.final.{name}"]) for name in latency.names}
        latency.final_upto = state["final_upto"]
        latency.newly_final = list(state["newly_final"])
        series.reasoning_tokens = Growable.of(0.0, arrays["reasoning.reasoning_tokens"])
        series.output_tokens = Growable.of(0.0, arrays["reasoning.output_tokens"])
        return series


def windowed_share_pct(part: np.ndarray, whole: np.ndarray, window_s: int) -> np.ndarray:
    """``100 * part / whole`` summed over the ``window_s`` seconds ending at each second;
    NaN where the window holds no output."""
    if part.size == 0:
        return np.zeros(0)
    window = max(1, int(window_s))

    def trailing(values: np.ndarray) -> np.ndarray:
        total = np.cumsum(values)
        total[window:] = total[window:] - total[:-window]
        return total

    parts, wholes = trailing(part), trailing(whole)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(wholes > 0, 100.0 * parts / wholes, math.nan)
