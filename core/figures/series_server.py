"""The server's and the GPUs' series of ``series.SeriesBuilder``, from the scrapes.

- ``running``, ``waiting``, ``kv_usage_pct``: the last scrape in the second, summed over
  URLs (KV averaged), NaN in a second without a good scrape; a replica whose /metrics
  went stale no longer counts in the sums;
- server token rates and preemptions: each URL's counter increase between two
  successive good scrapes (reset-safe, ``counters``) is spread uniformly over the
  interval between them and divided by the covered time of each second, then summed
  over URLs; ``prefix_hit_pct`` is Δhits/Δqueries over the last ``window_s`` seconds,
  and so is ``mm_cache_hit_pct`` (the multimodal processor cache), a series only of a
  run whose server counted a multimodal cache query (``optional_series``);
- GPU series (``GPU_SERIES``) from GPU samples (``ServerSample.is_gpu``: NVML, a DCGM
  exporter), the last in the second: utilisation and SM clock averaged over the GPUs,
  power and memory summed, over the sources not stale; they never touch the server's
  figures or its staleness, and a failed one is counted as a scrape failure of its URL.

The gauges are written into the builder's table of last values (``gauges``), which the
ticks' gauges share.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rampwatch.core.figures.counters import CounterTracker
from rampwatch.core.figures.gpu import combine_gpus, gpu_aggregates
from rampwatch.core.figures.samples import combine_samples
from rampwatch.core.figures.series_bins import Growable, sec
from rampwatch.core.figures.speculation import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    POSITION_PREFIX,
    position_deltas,
    spec_figures,
    spec_series,
)
from rampwatch.core.figures.steps import StepTracker
from rampwatch.core.figures.summary import GpuTotals
from rampwatch.core.timeline import RunHeader, ScrapeErrorLine, ServerSample, metrics_stale_after_s

# The counters whose rates are drawn: (series name, counter field)
SERVER_RATES = (
    ("server_prompt_tps", "prompt_tokens_total"),
    ("server_generation_tps", "generation_tokens_total"),
    ("preemptions", "preemptions_total"),
)


class ServerSeries:
    """The /metrics scrapes: gauges, spread counter rates and the scrape failures."""

    def __init__(self) -> None:
        self.metrics_available = False
        self.last_good_scrape_t: float | None = None
        self.tracker = CounterTracker()
        # url -> field -> (amount, covered seconds)
        self.spread: dict[str, dict[str, tuple[Growable, Growable]]] = {}
        # (url, reason) -> the line the events panel shows for it
        self.scrape_errors: dict[tuple[str, str], ScrapeErrorLine] = {}

    def on_good_scrape(
        self, sample: ServerSample, header: RunHeader | None, gauges: dict[str, Growable], steps: StepTracker
    ) -> None:
        self.metrics_available = True
        self.last_good_scrape_t = sample.t
        prev = self.tracker.last(sample.url)
        step = self.tracker.update(sample)
        if step is not None and prev is not None and sample.spec_accepted_by_position:
            step[1].update(position_deltas(prev, sample))
        # Counters that grew over an outage are not spread over it: the seconds the
        # server was not seen stay a gap rather than a line of made-up averages.
        if step is not None and step[0] <= metrics_stale_after_s(header):
            self._spread_deltas(sample.url, sample.t - step[0], sample.t, step[1])
        if step is not None and step[1].get(DRAFTS) is not None:  # the step table's acceptance
            deltas = step[1]
            steps.on_spec(sample.t, deltas[DRAFTS] or 0.0, deltas.get(DRAFT_TOKENS) or 0.0, deltas.get(ACCEPTED) or 0.0)
        self._set_gauges(sample.t, header, gauges, steps)

    def _set_gauges(self, t: float, header: RunHeader | None, gauges: dict[str, Growable], steps: StepTracker) -> None:
        # A replica whose /metrics went stale no longer counts in the sums: its last
        # running/waiting are not its current ones.
        stale_after = metrics_stale_after_s(header)
        combined = combine_samples([s for s in self.tracker.latest() if t - s.t <= stale_after])
        s = sec(t)
        if combined.running is not None:
            gauges["running"].set(s, float(combined.running))
        if combined.waiting is not None:
            gauges["waiting"].set(s, float(combined.waiting))
        if combined.kv_usage is not None:
            gauges["kv_usage_pct"].set(s, 100.0 * combined.kv_usage)
        steps.on_gauges(
            t,
            None if combined.waiting is None else float(combined.waiting),
            None if combined.kv_usage is None else 100.0 * combined.kv_usage,
        )

    def _spread_deltas(self, url: str, t0: float, t1: float, deltas: dict[str, float | None]) -> None:
        per_url = self.spread.setdefault(url, {})
        span = t1 - t0
        first, last = sec(t0), sec(t1)
        overlaps = [(b, min(t1, b + 1.0) - max(t0, float(b))) for b in range(first, last + 1)]
        for field, delta in deltas.items():
            if delta is None:
                continue
            amount, covered = per_url.get(field) or per_url.setdefault(field, (Growable(0.0), Growable(0.0)))
            rate = delta / span
            for b, overlap in overlaps:
                if overlap > 0:
                    amount.add(b, rate * overlap)
                    covered.add(b, overlap)

    def count_error(self, sample: ServerSample) -> None:
        """A failed scrape (of /metrics or a GPU source): one events line per URL and reason."""
        message = sample.error or "failed"
        line = self.scrape_errors.pop((sample.url, message), None)
        if line is None:
            line = ScrapeErrorLine(sample.url, message, 0, sample.t, sample.t, gpu=sample.is_gpu)
        line.count += 1
        line.last_t = max(line.last_t, sample.t)
        self.scrape_errors[(sample.url, message)] = line  # re-inserted: newest last

    def _rate(self, field: str, n: int) -> np.ndarray:
        total = np.full(n, math.nan)
        for per_url in self.spread.values():
            pair = per_url.get(field)
            if pair is None:
                continue
            amount, covered = pair[0].head(n), pair[1].head(n)
            has = covered > 0
            rate = np.divide(amount, covered, out=np.zeros(n), where=has)
            total = np.where(has, np.nan_to_num(total) + rate, total)
        return total

    def arrays(self, n: int, out: dict[str, np.ndarray], window_s: int) -> None:
        """The first ``n`` seconds of the counter rates into ``out``, with the per-second
        prefix hit and query rates behind the windowed ratio (``_prefix_hits``, ``_prefix_queries``)."""
        for name, field in SERVER_RATES:
            out[name] = self._rate(field, n)
        hits = self._rate("prefix_hits_total", n)
        queries = self._rate("prefix_queries_total", n)
        out["prefix_hit_pct"] = _window_ratio(hits, queries, window_s)
        out["_prefix_hits"], out["_prefix_queries"] = hits, queries
        mm_hits = self._rate("mm_cache_hits_total", n)
        mm_queries = self._rate("mm_cache_queries_total", n)
        out["mm_cache_hit_pct"] = _window_ratio(mm_hits, mm_queries, window_s)
        out["_mm_hits"], out["_mm_queries"] = mm_hits, mm_queries
        if self.spec_available:  # speculative decoding's series and rates: only when the server speculates
            for field in self._spec_fields():
                out["_spec." + field] = self._rate(field, n)
            out.update(
                spec_series(out["_spec." + DRAFTS], out["_spec." + DRAFT_TOKENS], out["_spec." + ACCEPTED], window_s)
            )

    @staticmethod
    def optional_series(arrays: dict[str, np.ndarray]) -> tuple[str, ...]:
        """The series beyond ``SERIES_NAMES`` this run has: ``mm_cache_hit_pct`` once the
        server counted a multimodal cache query (a run without images has none of it)."""
        return ("mm_cache_hit_pct",) if np.nansum(arrays["_mm_queries"]) > 0 else ()

    @property
    def spec_available(self) -> bool:
        """Whether some URL's speculative-decoding counters have grown between two scrapes."""
        return any(DRAFTS in fields for fields in self.spread.values())

    def _spec_fields(self) -> list[str]:
        positions = {f for fields in self.spread.values() for f in fields if f.startswith(POSITION_PREFIX)}
        return [DRAFTS, DRAFT_TOKENS, ACCEPTED, *sorted(positions, key=lambda f: int(f.removeprefix(POSITION_PREFIX)))]

    def summary(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        """Run-so-far server figures from the series (``arrays`` output)."""

        def agg(fn, arr):
            arr = arr[~np.isnan(arr)]
            return float(fn(arr)) if arr.size else None

        hits = float(np.nansum(arrays["_prefix_hits"]))
        queries = float(np.nansum(arrays["_prefix_queries"]))
        mm_queries = float(np.nansum(arrays["_mm_queries"]))
        mm = {"mm_cache_hit_pct": float(100 * np.nansum(arrays["_mm_hits"]) / mm_queries)} if mm_queries else {}
        out: dict[str, Any] = {
            "available": self.metrics_available,
            "avg_prompt_throughput": agg(np.mean, arrays["server_prompt_tps"]),
            "avg_generation_throughput": agg(np.mean, arrays["server_generation_tps"]),
            "max_running": agg(np.max, arrays["running"]),
            "max_waiting": agg(np.max, arrays["waiting"]),
            "max_kv_usage_pct": agg(np.max, arrays["kv_usage_pct"]),
            "prefix_hit_pct": float(100 * hits / queries) if queries else None,
            "preemptions": agg(np.sum, arrays["preemptions"]),
            **mm,
        }
        if "_spec." + DRAFTS in arrays:
            totals = {
                key[len("_spec.") :]: float(np.nansum(a)) for key, a in arrays.items() if key.startswith("_spec.")
            }
            out["speculation"] = spec_figures(totals)
        return out


def _window_ratio(num: np.ndarray, den: np.ndarray, window_s: int) -> np.ndarray:
    n = num.size
    if n == 0:
        return num.copy()
    cn = np.concatenate(([0.0], np.cumsum(np.nan_to_num(num))))
    cd = np.concatenate(([0.0], np.cumsum(np.nan_to_num(den))))
    idx = np.arange(1, n + 1)
    lo = np.maximum(idx - window_s, 0)
    wn, wd = cn[idx] - cn[lo], cd[idx] - cd[lo]
    return np.divide(100.0 * wn, wd, out=np.full(n, math.nan), where=wd > 0)


class GpuSeries:
    """The GPU samples: each source's latest good one, when the newest was, run totals."""

    def __init__(self) -> None:
        self.latest: dict[str, ServerSample] = {}
        self.last_good_t: float | None = None
        self.totals = GpuTotals()

    def on_good_sample(self, sample: ServerSample, header: RunHeader | None, gauges: dict[str, Growable]) -> None:
        self.latest[sample.url] = sample
        self.last_good_t = sample.t
        self.totals.add(sample)
        s = sec(sample.t)
        for name, value in gpu_aggregates(combine_gpus(self._fresh(sample.t, header))).items():
            gauges[name].set(s, value)

    def _fresh(self, t: float, header: RunHeader | None) -> list[ServerSample]:
        """The latest sample of each GPU source not stale at ``t``: a source that stopped
        answering no longer counts in the sums (its last power is not its current one)."""
        stale_after = metrics_stale_after_s(header)
        return [s for s in self.latest.values() if t - s.t <= stale_after]

    def gpus(self) -> dict[str, Any]:
        return combine_gpus(list(self.latest.values())) if self.latest else {}
