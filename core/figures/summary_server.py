"""The summary's server figures, from the ``/metrics`` scrapes (``server_figures``), and
its GPU figures, from the GPU samples (``GpuTotals``, kept as they arrive; ``gpu_figures``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, TypeGuard

from rampwatch.core.figures.counters import CounterTracker
from rampwatch.core.figures.gpu import NVML_URL
from rampwatch.core.figures.images import mm_cache_figures
from rampwatch.core.figures.lora import lora_figures
from rampwatch.core.figures.samples import combine_samples
from rampwatch.core.figures.speculation import DRAFTS, position_deltas, spec_figures
from rampwatch.core.timeline import RunHeader, ServerSample


def _usable(gauge: float | None) -> TypeGuard[float]:
    """A gauge reading to take: scrapes drop NaN, infinite and negative values
    (``scrape.screen_samples``), but recordings made before kept them."""
    return gauge is not None and math.isfinite(gauge) and gauge >= 0


def server_figures(samples: Sequence[ServerSample]) -> dict[str, Any]:
    """Run-wide server figures from the scrapes (per URL counter deltas, reset-safe).

    Throughputs are summed counter increases over the time the scrapes covered; the
    prefix hit rate is Δhits/Δqueries over the whole run; maxima are over the combined
    (summed over URLs) gauges of each poll.
    """
    tracker = CounterTracker()
    totals: dict[str, float] = {}
    covered: dict[str, float] = {}
    backends: set[str] = set()
    latest: dict[str, ServerSample] = {}
    max_running = max_waiting = max_kv = None
    ok = 0
    samples = [s for s in samples if not s.is_gpu]  # GPU telemetry: gpu_figures
    for s in sorted(samples, key=lambda x: x.t):
        if not s.ok:
            continue
        ok += 1
        backends.add(s.backend)
        prev = tracker.last(s.url)
        step = tracker.update(s)
        if step is not None:
            dt, deltas = step
            if prev is not None and s.spec_accepted_by_position:
                deltas.update(position_deltas(prev, s))
            for name, d in deltas.items():
                if d is not None:
                    totals[name] = totals.get(name, 0.0) + d
                    covered.setdefault(s.url, 0.0)
            covered[s.url] = covered.get(s.url, 0.0) + dt
        latest[s.url] = s
        combined = combine_samples(list(latest.values()))
        if _usable(combined.running):
            max_running = combined.running if max_running is None else max(max_running, combined.running)
        if _usable(combined.waiting):
            max_waiting = combined.waiting if max_waiting is None else max(max_waiting, combined.waiting)
        if _usable(combined.kv_usage):
            kv = combined.kv_usage * 100
            max_kv = kv if max_kv is None else max(max_kv, kv)
    span = max(covered.values()) if covered else 0.0  # replicas are scraped in parallel

    def rate(name: str) -> float | None:
        return totals[name] / span if name in totals and span > 0 else None

    queries = totals.get("prefix_queries_total")
    figures: dict[str, Any] = {
        "available": ok > 0,
        "scrapes_ok": ok,
        "scrapes_failed": sum(1 for s in samples if not s.ok),
        "backend": ",".join(sorted(backends)) if backends else None,
        # vLLM's "Avg prompt throughput" counts the prompt tokens it computed (prefix-cache
        # hits excluded); servers that do not export that count give all prompt tokens.
        "avg_prompt_throughput": rate("prompt_tokens_computed_total")
        if "prompt_tokens_computed_total" in totals
        else rate("prompt_tokens_total"),
        "avg_prompt_throughput_all": rate("prompt_tokens_total"),
        "avg_generation_throughput": rate("generation_tokens_total"),
        "max_running": max_running,
        "max_waiting": max_waiting,
        "max_kv_usage_pct": max_kv,
        "prefix_hit_pct": (totals.get("prefix_hits_total", 0.0) / queries * 100) if queries else None,
        "preemptions": totals.get("preemptions_total"),
        **mm_cache_figures(totals),  # only when the server counted a multimodal cache query
    }
    lora = lora_figures(samples)  # only where the server exports vllm:lora_requests_info
    if lora is not None:
        figures["lora"] = lora
    if DRAFTS in totals:  # the server speculates: acceptance over the run (core.figures.speculation)
        figures["speculation"] = spec_figures(totals)
    return figures


class GpuTotals:
    """Run-wide GPU figures from GPU samples (``ServerSample.is_gpu``) fed in time order.

    Energy is the integral of power over time by the trapezoid rule over each source's
    good samples (its GPUs' power summed at each sample), summed over sources; a stretch
    where a source failed is bridged by the straight line between the samples around it.
    Mean power is that energy over the longest time one source's samples cover.
    """

    def __init__(self) -> None:
        self.samples = 0
        self.gpu_count = 0  # most GPUs one poll reported, summed over sources
        self.energy_j = 0.0
        self.max_power_w: float | None = None
        self.max_util_pct: float | None = None
        self.max_mem_used_mib: float | None = None
        self._util_sum = 0.0
        self._util_n = 0
        # source -> (t of its last good sample, its power then or None, its GPU count)
        self._last: dict[str, tuple[float, float | None, int]] = {}
        self._first_t: dict[str, float] = {}

    def add(self, sample: ServerSample) -> None:
        if not (sample.ok and sample.is_gpu and sample.gpus):
            return
        self.samples += 1
        gpus = sample.gpus.values()
        powers = [g["power_w"] for g in gpus if "power_w" in g]
        power = sum(powers) if powers else None
        prev = self._last.get(sample.url)
        if prev is not None and prev[1] is not None and power is not None and sample.t > prev[0]:
            self.energy_j += (prev[1] + power) / 2.0 * (sample.t - prev[0])
        if power is not None:
            self._first_t.setdefault(sample.url, sample.t)
        self._last[sample.url] = (sample.t, power, len(sample.gpus))
        self.gpu_count = max(self.gpu_count, sum(n for _, _, n in self._last.values()))
        current = [p for _, p, _ in self._last.values() if p is not None]
        if current:
            total = sum(current)
            self.max_power_w = total if self.max_power_w is None else max(self.max_power_w, total)
        for g in gpus:
            if "util_pct" in g:
                self._util_sum += g["util_pct"]
                self._util_n += 1
                self.max_util_pct = max(self.max_util_pct or 0.0, g["util_pct"])
        mem = [g["mem_used_mib"] for g in gpus if "mem_used_mib" in g]
        if mem:
            self.max_mem_used_mib = max(self.max_mem_used_mib or 0.0, sum(mem))

    @property
    def power_span_s(self) -> float:
        spans = [self._last[url][0] - first for url, first in self._first_t.items()]
        return max(spans, default=0.0)

    def figures(self) -> dict[str, Any]:
        """``{}`` without GPU samples; else the GPU figures, energy ``None`` without power."""
        if not self.samples:
            return {}
        span = self.power_span_s
        has_energy = span > 0
        return {
            "gpus": self.gpu_count,
            "samples": self.samples,
            "mean_util_pct": self._util_sum / self._util_n if self._util_n else None,
            "max_util_pct": self.max_util_pct,
            "max_mem_used_gib": None if self.max_mem_used_mib is None else self.max_mem_used_mib / 1024.0,
            "max_power_w": self.max_power_w,
            "mean_power_w": self.energy_j / span if has_energy else None,
            "energy_j": self.energy_j if has_energy else None,
            "energy_span_s": span if has_energy else None,
        }

    def export_state(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "gpu_count": self.gpu_count,
            "energy_j": self.energy_j,
            "max_power_w": self.max_power_w,
            "max_util_pct": self.max_util_pct,
            "max_mem_used_mib": self.max_mem_used_mib,
            "util": [self._util_sum, self._util_n],
            "last": {url: list(v) for url, v in self._last.items()},
            "first_t": dict(self._first_t),
        }

    @classmethod
    def restore_state(cls, state: dict[str, Any]) -> GpuTotals:
        """From ``export_state``."""
        b = cls()
        b.samples, b.gpu_count, b.energy_j = state["samples"], state["gpu_count"], state["energy_j"]
        b.max_power_w, b.max_util_pct = state["max_power_w"], state["max_util_pct"]
        b.max_mem_used_mib = state["max_mem_used_mib"]
        b._util_sum, b._util_n = state["util"]
        b._last = {url: (v[0], v[1], v[2]) for url, v in state["last"].items()}
        b._first_t = dict(state["first_t"])
        return b


def gpu_figures(samples: Sequence[ServerSample]) -> dict[str, Any]:
    """Run-wide GPU figures (``GpuTotals``) from a run's samples; ``{}`` without GPU samples."""
    totals = GpuTotals()
    for s in sorted(samples, key=lambda x: x.t):
        totals.add(s)
    return totals.figures()


SIMULATED_GPU = "simulated"


def gpu_source(header: RunHeader | None) -> str | None:
    """Where a run's GPU figures came from: ``SIMULATED_GPU`` (the embedded simulator's
    modelled DCGM page), "NVML", "DCGM" or "NVML + DCGM"; None when the header does not say."""
    if header is None:
        return None
    if header.gpu_simulated:
        return SIMULATED_GPU
    kinds = dict.fromkeys("NVML" if source == NVML_URL else "DCGM" for source in header.gpu_sources)
    return " + ".join(kinds) or None
