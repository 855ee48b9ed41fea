"""End-of-run figures: the typed ``Summary``, built by ``SummaryBuilder`` from blocks of
finished requests (``RequestBlock``), its text form (``format_summary``), the
``vllm bench serve --save-result`` JSON (``to_bench_result``).

One builder serves every caller: the end of a live or headless run and ``summarise_requests``
(records in memory), ``rampwatch report``/``export``/``compare`` (a recording fed block
by block, ``record.analysis``) and the live run-so-far figures (``bounded=True``).

Client figures follow ``core.figures.stats`` (vLLM's definitions). ``Summary.to_dict()`` has
the keys of vLLM's result JSON where vLLM has the figure (``completed``,
``request_throughput``, ``mean_ttft_ms``, ``p99_itl_ms``...), plus ``p50``/``p90`` for every
latency metric, ``send_lateness_ms`` (how late the client sent: ``SendLatenessMs``),
``server`` (figures from ``/metrics``), ``errors_by_class``, ``knee_rps`` and, with a GPU
price, ``cost_per_1m_output_tokens`` / ``cost_per_1m_total_tokens`` (hourly price /
measured tokens per second * 1e6 / 3600). With GPU telemetry (NVML, a
DCGM exporter) ``gpu`` holds the GPU figures (``GpuTotals``) and, when power is known,
``energy_wh`` and ``tokens_per_joule`` (output tokens ÷ the energy the GPUs drew).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np
import orjson

from rampwatch.core import strict_json
from rampwatch.core.figures import stats
from rampwatch.core.figures.client_lag import CLIENT_LAG_FLOOR_MS, CLIENT_LAG_SHARE, CPU_STARVED_PCT, ClientFigures
from rampwatch.core.figures.counters import CounterTracker
from rampwatch.core.figures.gpu import NVML_URL
from rampwatch.core.figures.samples import combine_samples
from rampwatch.core.text import printable
from rampwatch.core.timeline import CANCELLED, CLIENT_LIMIT, Event, RequestRecord, RunHeader, ServerSample

METRICS = ("ttft", "tpot", "itl", "e2el")
METRIC_TITLES = {
    "ttft": ("TTFT", "Time to First Token"),
    "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
    "itl": ("ITL", "Inter-token Latency"),
    "e2el": ("E2EL", "End-to-end Latency"),
}


def cost_per_million_tokens(price_per_hour: float | None, tokens_per_s: float) -> float | None:
    """What a million tokens cost at ``tokens_per_s`` on hardware rented by the hour."""
    if price_per_hour is None or tokens_per_s <= 0:
        return None
    return price_per_hour / tokens_per_s * 1e6 / 3600


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
        step = tracker.update(s)
        if step is not None:
            dt, deltas = step
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
    return {
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
    }


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


def tokens_per_joule(output_tokens: int, energy_j: float | None) -> float | None:
    """Output tokens per joule of GPU energy; None without a positive energy."""
    if energy_j is None or energy_j <= 0:
        return None
    return output_tokens / energy_j


def concurrency_cap(header: RunHeader | None) -> int | None:
    """The run's ``--max-concurrency``, from the flag or the scenario's ``max_concurrency``."""
    if header is None:
        return None
    cap = header.options.get("max_concurrency") or header.scenario.get("max_concurrency")
    return int(cap) if isinstance(cap, (int, float)) and cap > 0 else None


def knee_rps(events: Sequence[Event]) -> float | None:
    for e in events:
        if e.kind == "knee" and "offered_rps" in e.data:
            return float(e.data["offered_rps"])
    return None


KNEE_REVIEW = "knee_review"  # an info event's data key: it settles a knee's explanation


def knee_review(events: Sequence[Event], knee: Event) -> Event | None:
    """The event that settled ``knee``'s explanation with the seconds after it
    (``knee_explain.KneeReview``); None before then, or for a run made before reviews."""
    return next(
        (e for e in events if e.kind == "info" and e.data.get(KNEE_REVIEW) and e.data.get("knee_t") == knee.t),
        None,
    )


def knee_explanation(events: Sequence[Event]) -> dict[str, Any] | None:
    """Why the first knee happened (``knee_explain.KneeExplanation.to_dict``): as its
    review settled it, else as the knee's event declared it; None without a knee or for
    a knee recorded before explanations."""
    for e in events:
        if e.kind == "knee":
            review = knee_review(events, e)
            why = (review or e).data.get("explanation")
            return dict(why) if isinstance(why, dict) else None
    return None


@dataclass(frozen=True)
class LatencyMs:
    """One latency metric over the run, in milliseconds, as ``stats.describe_ms`` gives it."""

    mean: float
    median: float
    std: float
    percentiles: dict[str, float]  # "p50", "p99", "p99.9"... (vLLM's spelling)

    @classmethod
    def from_describe(cls, figures: dict[str, float]) -> LatencyMs:
        return cls(
            figures["mean"],
            figures["median"],
            figures["std"],
            {k: v for k, v in figures.items() if k not in ("mean", "median", "std")},
        )

    def items(self) -> list[tuple[str, float]]:
        """``(stat, ms)`` in vLLM's key order: mean, median, std, then the percentiles."""
        return [("mean", self.mean), ("median", self.median), ("std", self.std), *self.percentiles.items()]


# A p99 send lateness above this says the client did not keep the schedule. A client with
# CPU to spare sends at 200 req/s with a p99 of 1.4-4.5 ms on a shared 2-vCPU machine
# (docs/benchmarks.md, huge /metrics pages and the TUI drawing included), a starved one
# hundreds of ms late: 10 ms is twice the worst healthy p99 measured there. At low rates
# the bound is the mean gap between sends instead (``late_send_bound_ms``): a send 20 ms
# late at 8 req/s (125 ms apart) jitters the arrivals but offers the same load, while
# sends later than the gap between them bunch up.
LATE_SEND_P99_MS = 10.0


@dataclass(frozen=True)
class SendLatenessMs:
    """How late the client sent its requests (``sent_at - scheduled_at``), in ms: exact
    percentiles (numpy's, as ``stats.describe_ms``) over the requests that were sent."""

    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, lateness_s: np.ndarray) -> SendLatenessMs | None:
        """The figures of ``lateness_s`` (seconds); None when nothing was sent."""
        if lateness_s.size == 0:
            return None
        p50, p99 = np.percentile(lateness_s, (50, 99)) * 1000
        return cls(float(p50), float(p99), float(lateness_s.max()) * 1000)

    def to_dict(self) -> dict[str, float]:
        return {"p50": self.p50, "p99": self.p99, "max": self.max}


def late_send_bound_ms(figures: Summary) -> float:
    """The p99 send lateness above which the schedule was not kept: ``LATE_SEND_P99_MS``,
    or the mean gap between sends when that is longer (the run's window over its
    requests: an overestimate by the drain, so a low-rate run warns only when clearly
    late)."""
    sends = figures.completed + figures.failed + figures.cancelled
    gap_ms = 1000.0 * figures.duration_s / sends if sends and figures.duration_s > 0 else 0.0
    return max(LATE_SEND_P99_MS, gap_ms)


def lateness_warning(figures: Summary) -> str | None:
    """One line when the p99 send lateness passes ``late_send_bound_ms``, else None. Under
    a concurrency cap a request waits for a slot before it is sent, and the records do
    not say how much of its lateness was that wait: there the line says so, not that
    the client was short of CPU."""
    late = figures.send_lateness
    if late is None or late.p99 <= late_send_bound_ms(figures):
        return None
    shown = f"p99 {late.p99:.0f} ms, max {late.max:.0f} ms"
    # A client out of open files failed its requests itself: the slots were not the wait.
    if figures.max_concurrency is not None and not figures.errors_by_class.get(CLIENT_LIMIT):
        return (
            f"warning: requests were sent late ({shown}) as they waited for one of the "
            f"{figures.max_concurrency} --max-concurrency slots: the schedule's rate was not offered "
            f"in full; the wait is part of the lateness, so it does not show whether the client kept up"
        )
    return f"warning: the client sent late ({shown}): the offered rate was not fully met; see docs/scale.md"


def client_limit_warning(figures: Summary) -> str | None:
    """One line when requests failed because the client ran out of open files: its own
    limit, to raise before the figures say anything about the server."""
    failed = figures.errors_by_class.get(CLIENT_LIMIT, 0)
    if not failed:
        return None
    above = f" above --max-concurrency {figures.max_concurrency}" if figures.max_concurrency else ""
    return (
        f"warning: {failed:,} requests failed in the client, not at the server: it ran out of open files "
        f"({CLIENT_LIMIT}); raise its limit (ulimit -n){above} and run again"
    )


def client_lag_bound_ms(p99_ms: float) -> float:
    """The client's lag p99 above which it could have moved a p99 of ``p99_ms``:
    ``CLIENT_LAG_FLOOR_MS``, or ``CLIENT_LAG_SHARE`` of it when that is larger (1 ms is
    noise on a 2 s TTFT, not on a 5 ms ITL)."""
    return max(CLIENT_LAG_FLOOR_MS, CLIENT_LAG_SHARE * p99_ms)


def client_lag_cause(client: ClientFigures) -> str:
    """Why the loops ran late, from what the run measured: waiting for a CPU (the machine
    is short of cores), full collections, or the client's own work."""
    if client.cpu_wait_pct is not None and client.cpu_wait_pct >= CPU_STARVED_PCT:
        return f"it waited for a CPU {client.cpu_wait_pct:.0f} % of its busy time: this machine is short of cores"
    full = client.gc_collections[2]
    if full:
        return f"{full} full GC pass{'es' if full != 1 else ''} during the load"
    return "its own work held the loop"


def client_lag_warning(figures: Summary) -> str | None:
    """One line when the client's stream-reading loops ran late enough to move a TTFT or
    ITL p99 it reports (its lag p99 over ``client_lag_bound_ms`` of that p99), naming
    each figure it could have moved, by how much at most, and the likely cause; None
    otherwise, and when no request gave a TTFT or an ITL."""
    client = figures.client
    if client is None or client.lag_p99_ms is None:
        return None
    lag = client.lag_p99_ms
    moved = []
    for metric, label in (("ttft", "TTFT"), ("itl", "ITL")):
        p99 = figures.latency(metric).percentiles.get("p99")
        if figures.completed == 0 or p99 is None or math.isnan(p99) or p99 <= 0 or lag <= client_lag_bound_ms(p99):
            continue
        moved.append(f"{label} p99 {p99:.1f} ms" + (" (all of it, as far as this run can tell)" if lag >= p99 else ""))
    if not moved:
        return None
    return (
        f"warning: the client ran late (loop lag p99 {lag:.1f} ms, max {client.lag_max_ms or 0.0:.0f} ms; "
        f"{client_lag_cause(client)}): {' and '.join(moved)} may hold up to {lag:.1f} ms of the client's own "
        f"delay; see docs/scale.md"
    )


@dataclass(frozen=True)
class Summary:
    """Every figure of ``vllm bench serve``'s summary, plus server side, errors and cost.

    ``duration_s`` is the run's window as vLLM measures it: first send to last completion.
    Rates and costs are derived from the counts (properties); ``to_dict()`` gives the
    vLLM-bench-schema keys."""

    duration_s: float
    completed: int
    failed: int  # ended in an error; requests cancelled by the run are not failures
    total_input_tokens: int
    total_output_tokens: int
    good_requests: int | None  # requests meeting every SLO; None without SLOs
    peak_output_chunks_per_s: float  # vLLM's "max_output_tokens_per_s" (it counts chunks); NaN when not tracked
    peak_concurrent_requests: int  # most requests sent and not ended at once, whatever their outcome
    max_concurrency: int | None  # the run's concurrency cap
    tokens_from_usage: bool  # every successful request's token counts came from the server
    ttft: LatencyMs
    tpot: LatencyMs
    itl: LatencyMs
    e2el: LatencyMs
    mean_client_queue_ms: float
    errors_by_class: dict[str, int]
    server: dict[str, Any]
    knee_rps: float | None
    gpu_price_per_hour: float | None = None
    slo_ms: dict[str, float] | None = None
    # Time requests waited for a --max-concurrency slot (sent_at - scheduled_at), over
    # every request (one that waited and then failed still waited); None: no cap.
    client_queue: LatencyMs | None = None
    cancelled: int = 0  # cancelled by the run (a stop's grace period over, the drain ended by hand)
    # Each failure class's first error text, as the client recorded it (made printable):
    # "http_307" alone does not say which redirect, nor "stream_aborted" what came instead.
    error_examples: dict[str, str] = field(default_factory=dict)
    gpu: dict[str, Any] | None = None  # GpuTotals.figures(); None or {}: no GPU telemetry
    # Why the knee happened: the limit, evidence and what to try (knee_explain's dict form).
    knee_explanation: dict[str, Any] | None = None
    # None when nothing was sent, and in the live run-so-far figures (bounded memory).
    send_lateness: SendLatenessMs | None = None
    # The client's self-check: its loops' lag and its collections (None: a recording
    # made before it).
    client: ClientFigures | None = None

    @property
    def _divisor_s(self) -> float:
        return max(self.duration_s, 1e-9)

    @property
    def request_throughput(self) -> float:
        return self.completed / self._divisor_s

    @property
    def request_goodput(self) -> float | None:
        return None if self.good_requests is None else self.good_requests / self._divisor_s

    @property
    def output_throughput(self) -> float:
        return self.total_output_tokens / self._divisor_s

    @property
    def total_token_throughput(self) -> float:
        return (self.total_input_tokens + self.total_output_tokens) / self._divisor_s

    @property
    def cost_per_1m_output_tokens(self) -> float | None:
        return cost_per_million_tokens(self.gpu_price_per_hour, self.output_throughput)

    @property
    def cost_per_1m_total_tokens(self) -> float | None:
        return cost_per_million_tokens(self.gpu_price_per_hour, self.total_token_throughput)

    @property
    def energy_j(self) -> float | None:
        """The GPUs' energy over the run (GpuTotals: ∫ power dt); None without power."""
        return (self.gpu or {}).get("energy_j")

    @property
    def tokens_per_joule(self) -> float | None:
        return tokens_per_joule(self.total_output_tokens, self.energy_j)

    def latency(self, metric: str) -> LatencyMs:
        return getattr(self, metric)

    def to_dict(self) -> dict[str, Any]:
        """The figures under vLLM's result-JSON keys (``mean_ttft_ms``...), in its order."""
        out: dict[str, Any] = {
            "duration": self.duration_s,
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "total_input_tokens": self.total_input_tokens,
            "total_output_tokens": self.total_output_tokens,
            "request_throughput": self.request_throughput,
            "request_goodput": self.request_goodput,
            "output_throughput": self.output_throughput,
            "total_token_throughput": self.total_token_throughput,
            "max_output_tokens_per_s": self.peak_output_chunks_per_s,
            "max_concurrent_requests": self.peak_concurrent_requests,
            "max_concurrency": self.max_concurrency,
            "tokens_from_usage": self.tokens_from_usage,
        }
        if self.slo_ms:
            out["slo_ms"] = dict(self.slo_ms)
        for metric in METRICS:
            for stat, value in self.latency(metric).items():
                out[f"{stat}_{metric}_ms"] = value
        out["mean_client_queue_ms"] = self.mean_client_queue_ms
        if self.client_queue is not None:
            # vllm bench serve's "Client-side Queueing" keys (it reports them under a cap)
            for stat, value in self.client_queue.items():
                out[f"{stat}_client_queue_time_ms"] = value
        out["send_lateness_ms"] = None if self.send_lateness is None else self.send_lateness.to_dict()
        out["client"] = None if self.client is None else self.client.to_dict()
        out["errors_by_class"] = dict(self.errors_by_class)
        out["error_examples"] = dict(self.error_examples)
        out["server"] = self.server
        out["knee_rps"] = self.knee_rps
        out["knee_explanation"] = self.knee_explanation
        out["gpu_price_per_hour"] = self.gpu_price_per_hour
        out["cost_per_1m_output_tokens"] = self.cost_per_1m_output_tokens
        out["cost_per_1m_total_tokens"] = self.cost_per_1m_total_tokens
        out["gpu"] = dict(self.gpu or {})
        energy = self.energy_j
        out["energy_wh"] = None if energy is None else energy / 3600.0
        out["tokens_per_joule"] = self.tokens_per_joule
        return out


@dataclass(frozen=True)
class RequestBlock:
    """Finished requests as arrays, one entry per request (successful or not) unless said
    otherwise: the one input of ``SummaryBuilder``, whether the requests come as records
    (``from_records``) or as a recording's columns (``record.analysis``)."""

    error_classes: Sequence[str | None]  # None = succeeded
    sent_at: np.ndarray
    end_at: np.ndarray
    client_queue_s: np.ndarray
    first_token_at: np.ndarray  # NaN = no token arrived
    prompt_tokens: np.ndarray
    completion_tokens: np.ndarray
    tokens_from_usage: np.ndarray  # bool
    itls: np.ndarray  # every ITL of the successful requests, request after request
    token_times: np.ndarray  # first-token and chunk times of the successful requests with a first token
    error_messages: Sequence[str | None] = ()  # each request's error text (the summary keeps one a class)

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord]) -> RequestBlock:
        ok = [r for r in records if r.ok]
        with_first = [r for r in ok if r.first_token_at is not None]
        first_token_at = np.array([r.first_token_at for r in with_first], dtype=np.float64)
        chunk_times = [np.asarray(r.chunk_times, dtype=np.float64) for r in with_first]
        return cls(
            error_classes=[r.error_class for r in records],
            sent_at=np.array([r.sent_at for r in records], dtype=np.float64),
            end_at=np.array([r.end_at for r in records], dtype=np.float64),
            client_queue_s=np.array([r.client_queue_s for r in records], dtype=np.float64),
            first_token_at=np.array(
                [math.nan if r.first_token_at is None else r.first_token_at for r in records], dtype=np.float64
            ),
            prompt_tokens=np.array([r.prompt_tokens for r in records], dtype=np.int64),
            completion_tokens=np.array([r.completion_tokens for r in records], dtype=np.int64),
            tokens_from_usage=np.array([r.tokens_from_usage for r in records], dtype=bool),
            itls=stats.requests_itls(first_token_at, chunk_times),
            token_times=_concat([first_token_at, *chunk_times]),
            error_messages=[r.error for r in records],
        )


def send_lateness_s(block: RequestBlock, ok: np.ndarray) -> np.ndarray:
    """The lateness of each of the block's requests that was sent (``client_queue_s``,
    ``sent_at - scheduled_at``); ``ok``: which of them ended without an error. A request
    that ended without an answer at the instant it was to be sent (``sent_at == end_at``:
    cancelled while it waited for a concurrency slot or before its load worker sent it,
    or its worker was already lost) has no real send and is left out."""
    return block.client_queue_s[ok | (block.sent_at != block.end_at)]


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    parts = [p for p in parts if p.size]
    if not parts:
        return np.empty(0, dtype=np.float64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def first_token_send(records: Sequence[RequestRecord]) -> float | None:
    """Where vLLM's per-second token bins start: the first send of a successful request
    that got a token (``SummaryBuilder``'s ``token_bins_from``)."""
    return min((r.sent_at for r in records if r.ok and r.first_token_at is not None), default=None)


class SummaryBuilder:
    """Builds a ``Summary`` from ``RequestBlock``s fed in request order, in any number.

    ``token_bins_from`` (see ``first_token_send``) turns on the peak token rate (per-second
    token bins; NaN without). The peak concurrency needs every request's interval; a
    ``bounded`` builder (the live run-so-far figures) keeps none and reports
    ``peak_in_flight``, which the caller keeps from ticks (the run's exact count of the
    same thing).

    Peak concurrency counts every request from its send to its end, whatever its outcome:
    vLLM counts only the successful ones, which drops the requests a stop cancelled or
    an overloaded server failed, and so disagreed with the in-flight count on screen.

    Latencies are kept exactly (``stats.ExactValues``) unless ``bounded`` (the live view:
    ``stats.RunningValues``, percentiles within 1%); ``itl_values`` overrides the ITL
    store (a recording's ITLs lie on the µs grid: ``stats.MicrosecondCounts``).
    """

    def __init__(
        self,
        slo: dict[str, float] | None = None,
        gpu_price_per_hour: float | None = None,
        percentiles: Sequence[float] = stats.PERCENTILES,
        *,
        token_bins_from: float | None = None,
        bounded: bool = False,
        itl_values: type | None = None,
    ) -> None:
        self.slo = dict(slo) if slo else None
        self.gpu_price_per_hour = gpu_price_per_hour
        self.percentiles = tuple(percentiles)
        self.bounded = bounded
        values = stats.RunningValues if bounded else stats.ExactValues
        self.latencies = {m: (itl_values or values)() if m == "itl" else values() for m in METRICS}
        self.client_queue = values()
        # Exact only: the live figures (bounded) leave the send lateness out.
        self.send_lateness = None if bounded else stats.ExactValues()
        self.requests = 0
        self.completed = 0
        self.cancelled = 0
        self.good = 0
        self.total_input = 0
        self.total_output = 0
        self.tokens_from_usage = True
        self.errors: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}  # each failure class's first error text
        self.first_send_at = math.inf
        self.last_end_at = -math.inf
        self.peak_in_flight = 0
        self.token_bins_from = token_bins_from
        self._token_bins = np.zeros(0, dtype=np.int64)
        self._last_token_end = -math.inf  # last completion of a request with a token: where the bins end
        # [sent, end) of every request, whatever its outcome: the peak concurrency
        self._sent, self._ended = stats.ExactValues(), stats.ExactValues()

    @property
    def failed(self) -> int:
        return self.requests - self.completed - self.cancelled

    def add(self, record: RequestRecord) -> None:
        self.add_block(RequestBlock.from_records([record]))

    def add_block(self, block: RequestBlock) -> None:
        n = len(block.error_classes)
        if n == 0:
            return
        ok = np.fromiter((e is None for e in block.error_classes), dtype=bool, count=n)
        self.requests += n
        self.client_queue.add(block.client_queue_s)
        if self.send_lateness is not None:
            self.send_lateness.add(send_lateness_s(block, ok))
        self.cancelled += sum(1 for e in block.error_classes if e == CANCELLED)
        failed = [(i, e) for i, e in enumerate(block.error_classes) if e is not None and e != CANCELLED]
        self.errors.update(e for _, e in failed)
        if block.error_messages:  # each class's first text, from the failed requests only
            for i, e in failed:
                message = block.error_messages[i]
                if message and e not in self.error_examples:
                    self.error_examples[e] = message
        if not self.bounded:
            self._sent.add(block.sent_at)
            self._ended.add(block.end_at)
        self.first_send_at = min(self.first_send_at, float(block.sent_at.min()))
        self.last_end_at = max(self.last_end_at, float(block.end_at.max()))
        if not ok.any():
            return
        sent, end, first = block.sent_at[ok], block.end_at[ok], block.first_token_at[ok]
        completion = block.completion_tokens[ok]
        has_first = ~np.isnan(first)
        self.completed += int(ok.sum())
        self.total_input += int(block.prompt_tokens[ok].sum())
        self.total_output += int(stats.output_lens(completion).sum())
        self.tokens_from_usage = self.tokens_from_usage and bool(block.tokens_from_usage[ok].all())
        ttft = np.where(has_first, first - sent, 0.0)
        ttft = np.where(ttft == 0.0, 0.0, ttft)  # as `rec.ttft or 0.0`: no -0.0
        e2el = end - sent
        with_tpot = has_first & (completion > 1)
        tpot = (end[with_tpot] - first[with_tpot]) / (completion[with_tpot] - 1)
        self.latencies["ttft"].add(ttft)
        self.latencies["tpot"].add(tpot)
        self.latencies["itl"].add(block.itls)
        self.latencies["e2el"].add(e2el)
        if self.slo:
            tpot_or_zero = np.zeros(ttft.size)
            tpot_or_zero[with_tpot] = tpot
            self.good += int(stats.meets_slo(ttft, tpot_or_zero, e2el, self.slo).sum())
        if self.token_bins_from is not None:
            if has_first.any():
                self._last_token_end = max(self._last_token_end, float(end[has_first].max()))
            counts = stats.per_second_counts(block.token_times, self.token_bins_from)
            if counts.size > self._token_bins.size:
                counts[: self._token_bins.size] += self._token_bins
                self._token_bins = counts
            else:
                self._token_bins[: counts.size] += counts

    def window_s(self) -> float | None:
        """vLLM's benchmark duration: first send to last completion (None before any request)."""
        return self.last_end_at - self.first_send_at if self.requests else None

    def _peaks(self) -> tuple[float, int]:
        if self.bounded:
            return math.nan, self.peak_in_flight
        peak_concurrent = stats.max_concurrent(self._sent.values(), self._ended.values())
        if self.token_bins_from is None:
            return math.nan, peak_concurrent
        if self._last_token_end == -math.inf:
            return 0.0, peak_concurrent
        # vLLM's bins end at the second of the last completion
        bins = self._token_bins[: int(math.ceil(self._last_token_end - self.token_bins_from)) + 1]
        return (float(bins.max()) if bins.size else 0.0), peak_concurrent

    def build(
        self,
        header: RunHeader | None = None,
        server: dict[str, Any] | None = None,
        knee: float | None = None,
        duration_s: float | None = None,
        idle_duration_s: float = 0.0,
        gpu: dict[str, Any] | None = None,
        knee_why: dict[str, Any] | None = None,
        client: ClientFigures | None = None,
    ) -> Summary:
        """The summary so far. ``duration_s`` overrides the run's window (``window_s``);
        ``idle_duration_s`` is reported when no request has finished; ``gpu`` is
        ``GpuTotals.figures()``."""
        if duration_s is None:
            window = self.window_s()
            duration_s = idle_duration_s if window is None else window
        peak_rate, peak_concurrent = self._peaks()
        max_concurrency = concurrency_cap(header)
        described = {m: LatencyMs.from_describe(v.describe_ms(self.percentiles)) for m, v in self.latencies.items()}
        return Summary(
            duration_s=duration_s,
            completed=self.completed,
            failed=self.failed,
            cancelled=self.cancelled,
            total_input_tokens=self.total_input,
            total_output_tokens=self.total_output,
            good_requests=self.good if self.slo else None,
            peak_output_chunks_per_s=peak_rate,
            peak_concurrent_requests=peak_concurrent,
            max_concurrency=max_concurrency,
            tokens_from_usage=self.tokens_from_usage,
            ttft=described["ttft"],
            tpot=described["tpot"],
            itl=described["itl"],
            e2el=described["e2el"],
            mean_client_queue_ms=self.client_queue.describe_ms(())["mean"],
            errors_by_class=dict(sorted(self.errors.items())),
            error_examples=dict(sorted(self.error_examples.items())),
            server=server or {},
            knee_rps=knee,
            knee_explanation=knee_why,
            gpu_price_per_hour=self.gpu_price_per_hour,
            slo_ms=self.slo,
            client_queue=None
            if max_concurrency is None
            else LatencyMs.from_describe(self.client_queue.describe_ms(self.percentiles)),
            gpu={**gpu, "source": gpu_source(header)} if gpu else None,
            send_lateness=None if self.send_lateness is None else SendLatenessMs.of(self.send_lateness.values()),
            client=client,
        )

    # -- live checkpoints (bounded builders only) ----------------------------------
    def _running_stores(self) -> dict[str, stats.RunningValues]:
        stores = {**self.latencies, "queue": self.client_queue}
        running = {name: s for name, s in stores.items() if isinstance(s, stats.RunningValues)}
        assert self.bounded and len(running) == len(stores), "only the live (bounded) builder is checkpointed"
        return running

    def export_state(self, arrays: dict[str, np.ndarray], prefix: str = "summary") -> dict[str, Any]:
        """A bounded builder's state as JSON-able values, its histograms put in ``arrays``
        (``<prefix>.<name>``); ``restore_state`` reads it back."""
        stores = self._running_stores()
        for name, store in stores.items():
            arrays[f"{prefix}.{name}"] = store.hist.counts
        return {
            "slo": self.slo,
            "gpu_price_per_hour": self.gpu_price_per_hour,
            "completed": self.completed,
            "cancelled": self.cancelled,
            "records": self.requests,
            "good": self.good,
            "total_input": self.total_input,
            "total_output": self.total_output,
            "tokens_from_usage": self.tokens_from_usage,
            "errors": dict(self.errors),
            "error_examples": dict(self.error_examples),
            "sums": {name: [s.n, s.total, s.squares] for name, s in stores.items()},
            "hist_totals": {name: s.hist.total for name, s in stores.items()},
            "first_send_at": None if self.requests == 0 else self.first_send_at,
            "last_end_at": None if self.requests == 0 else self.last_end_at,
            "peak_in_flight": self.peak_in_flight,
        }

    @classmethod
    def restore_state(
        cls, state: dict[str, Any], arrays: dict[str, np.ndarray], prefix: str = "summary"
    ) -> SummaryBuilder:
        b = cls(state["slo"], state["gpu_price_per_hour"], bounded=True)
        b.completed = state["completed"]
        b.cancelled = state["cancelled"]
        b.requests = state["records"]
        b.good = state["good"]
        b.total_input = state["total_input"]
        b.total_output = state["total_output"]
        b.tokens_from_usage = state["tokens_from_usage"]
        b.errors.update(state["errors"])
        b.error_examples.update(state["error_examples"])
        for name, store in b._running_stores().items():
            store.n, store.total, store.squares = state["sums"][name]
            store.hist._counts = np.array(arrays[f"{prefix}.{name}"], dtype=np.int64)
            store.hist.total = state["hist_totals"][name]
        if state["first_send_at"] is not None:
            b.first_send_at, b.last_end_at = state["first_send_at"], state["last_end_at"]
        b.peak_in_flight = state["peak_in_flight"]
        return b


def summarise_requests(
    header: RunHeader | None,
    records: Sequence[RequestRecord],
    samples: Sequence[ServerSample],
    events: Sequence[Event],
    slo: dict[str, float] | None = None,
    gpu_price_per_hour: float | None = None,
    percentiles: Sequence[float] = stats.PERCENTILES,
    duration_s: float | None = None,
    idle_duration_s: float = 0.0,
    client: ClientFigures | None = None,
) -> Summary:
    """The ``Summary`` of requests held in memory (the end of a run; tests).

    ``duration_s`` defaults to the run's window, first send to last completion.
    ``slo`` maps ``ttft``/``tpot``/``e2el`` to milliseconds, as ``--goodput``.
    """
    builder = SummaryBuilder(slo, gpu_price_per_hour, percentiles, token_bins_from=first_token_send(records))
    builder.add_block(RequestBlock.from_records(records))
    return builder.build(
        header,
        server_figures(samples),
        knee_rps(events),
        duration_s,
        idle_duration_s,
        gpu=gpu_figures(samples),
        knee_why=knee_explanation(events),
        client=client,
    )


def knee_why_lines(why: dict[str, Any]) -> list[str]:
    """The lines under the summary's knee: ``  why: batch-size cap (…) → try
    --max-num-seqs 128``, then any conflict between limits, and the seconds judged (with
    what the knee said first when those after it changed the explanation)."""
    text = f"  why: {why.get('title', why.get('limit'))} ({why.get('evidence', '')})"
    if why.get("try"):
        text += f" → try {why['try']}"
        if why.get("try_is") == "rampwatch flag":
            text += " (a rampwatch flag)"
    lines = [text]
    if why.get("conflict"):
        lines.append(f"  {why['conflict']}")
    judged = [f"judged on the {why['window']}"] if why.get("window") else []
    if isinstance(why.get("provisional"), dict):
        judged.append(f"revised: at the knee it read {provisional_text(why['provisional'])}")
    if judged:
        lines.append("  " + "; ".join(judged))
    return lines


def provisional_text(provisional: dict[str, Any]) -> str:
    """``batch-size cap → try --max-num-seqs 264``: what a knee's explanation said first."""
    text = str(provisional.get("title") or provisional.get("limit") or "")
    return text + (f" → try {provisional['try']}" if provisional.get("try") else "")


def _row(label: str, value: Any, fmt: str = ".2f") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = "n/a"
    elif isinstance(value, int) or fmt == "":
        text = str(value)
    else:
        text = format(value, fmt)
    return f"{label:<40} {text:<10}"


def format_summary(figures: Summary, percentiles: Sequence[float] = stats.PERCENTILES) -> str:
    """The summary as ``vllm bench serve`` prints it (50-column banner, 40-column
    labels), then a server-side section and the errors."""
    summary = figures.to_dict()  # the rows follow vLLM's keys
    lines = ["{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    lines.append(_row("Successful requests:", summary["completed"]))
    lines.append(_row("Failed requests:", summary["failed"]))
    if summary.get("cancelled"):
        lines.append(_row("Cancelled requests:", summary["cancelled"]))
    if summary.get("max_concurrency") is not None:
        lines.append(_row("Maximum request concurrency:", summary["max_concurrency"]))
    lines.append(_row("Benchmark duration (s):", float(summary["duration"])))
    lines.append(_row("Total input tokens:", summary["total_input_tokens"]))
    lines.append(_row("Total generated tokens:", summary["total_output_tokens"]))
    lines.append(_row("Request throughput (req/s):", summary["request_throughput"]))
    if summary.get("request_goodput") is not None:
        lines.append(_row("Request goodput (req/s):", summary["request_goodput"]))
    lines.append(_row("Output token throughput (tok/s):", summary["output_throughput"]))
    lines.append(_row("Peak output token throughput (tok/s):", summary["max_output_tokens_per_s"]))
    lines.append(_row("Peak concurrent requests:", float(summary["max_concurrent_requests"])))
    lines.append(_row("Total token throughput (tok/s):", summary["total_token_throughput"]))
    for metric in METRICS:
        short, title = METRIC_TITLES[metric]
        lines.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        lines.append(_row(f"Mean {short} (ms):", summary[f"mean_{metric}_ms"]))
        lines.append(_row(f"Median {short} (ms):", summary[f"median_{metric}_ms"]))
        for p in percentiles:
            word = stats.percentile_word(p)
            lines.append(_row(f"P{word} {short} (ms):", summary[f"p{word}_{metric}_ms"]))
    if figures.client_queue is not None:
        lines.append("{s:{c}^{n}}".format(s="Client-side Queueing", n=50, c="-"))
        lines.append(_row("Mean Client Queue Time (ms):", summary["mean_client_queue_time_ms"]))
        lines.append(_row("Median Client Queue Time (ms):", summary["median_client_queue_time_ms"]))
        for p in percentiles:
            word = stats.percentile_word(p)
            lines.append(_row(f"P{word} Client Queue Time (ms):", summary[f"p{word}_client_queue_time_ms"]))
    lateness = summary.get("send_lateness_ms") or {}
    lines.append("{s:{c}^{n}}".format(s="Client", n=50, c="-"))
    lines.append(_row("Send lateness p50 (ms):", lateness.get("p50")))
    lines.append(_row("Send lateness p99 (ms):", lateness.get("p99")))
    lines.append(_row("Send lateness max (ms):", lateness.get("max")))
    client = summary.get("client")
    if client is not None:
        lines.append(_row("Client loop lag p50 (ms):", client["loop_lag_p50_ms"]))
        lines.append(_row("Client loop lag p99 (ms):", client["loop_lag_p99_ms"]))
        lines.append(_row("Client loop lag max (ms):", client["loop_lag_max_ms"]))
        young, middle, full = client["gc_collections"]
        lines.append(_row("GC passes young/middle/full:", f"{young}/{middle}/{full}", ""))
        lines.append(_row("Longest GC pause, wall (ms):", client["gc_max_pause_ms"]))
        lines.append(_row("Client waited for a CPU (% busy):", client.get("cpu_wait_pct"), ".1f"))
    server = summary.get("server") or {}
    lines.append("{s:{c}^{n}}".format(s="Server (/metrics)", n=50, c="-"))
    if server.get("available"):
        lines.append(_row("Server kind:", server.get("backend"), ""))
        # vLLM's label for the tokens it computed, then every prompt token (cache hits too)
        lines.append(_row("Avg prompt throughput (tok/s):", server.get("avg_prompt_throughput")))
        lines.append(_row("Prompt incl. cache hits (tok/s):", server.get("avg_prompt_throughput_all")))
        lines.append(_row("Avg generation throughput (tok/s):", server.get("avg_generation_throughput")))
        lines.append(_row("Max running requests:", server.get("max_running"), ".0f"))
        lines.append(_row("Max waiting requests:", server.get("max_waiting"), ".0f"))
        lines.append(_row("Max KV-cache usage (%):", server.get("max_kv_usage_pct"), ".1f"))
        lines.append(_row("Prefix cache hit rate (%):", server.get("prefix_hit_pct"), ".1f"))
        lines.append(_row("Preemptions:", server.get("preemptions"), ".0f"))
    else:
        lines.append("no server metrics")
    if summary.get("knee_rps") is not None:
        lines.append(_row("Knee at offered rate (req/s):", summary["knee_rps"]))
        why = summary.get("knee_explanation")
        if why:
            lines.extend(knee_why_lines(why))
    if summary.get("cost_per_1m_output_tokens") is not None:
        lines.append(_row("Cost per 1M output tokens:", summary["cost_per_1m_output_tokens"]))
        lines.append(_row("Cost per 1M total tokens:", summary["cost_per_1m_total_tokens"]))
    lines.extend(_gpu_lines(summary))
    errors = summary.get("errors_by_class") or {}
    if errors:
        lines.append("{s:{c}^{n}}".format(s="Errors", n=50, c="-"))
        examples = summary.get("error_examples") or {}
        for name, count in errors.items():
            lines.append(_row(f"{name} (the client's own):" if name == CLIENT_LIMIT else f"{name}:", count))
            if examples.get(name):
                lines.append(f"  e.g. {error_example_text(examples[name])}")
    lines.append("=" * 50)
    for warning in (client_limit_warning(figures), lateness_warning(figures), client_lag_warning(figures)):
        if warning is not None:
            lines.append(warning)
    return "\n".join(lines)


# An error's text under its class in the summary: enough to name the URL or what came.
ERROR_EXAMPLE_CHARS = 160


def error_example_text(message: str) -> str:
    """A failure's text as the summary shows it: printable, on one line, cut short."""
    text = printable(str(message), one_line=True)
    return text if len(text) <= ERROR_EXAMPLE_CHARS else text[: ERROR_EXAMPLE_CHARS - 1] + "…"


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


def gpu_heading(source: str | None) -> str:
    """The GPU section's heading: it names where the figures came from."""
    if source == SIMULATED_GPU:
        return "GPU (simulated, not measured)"
    return f"GPU ({source})" if source else "GPU"


def _gpu_lines(summary: dict[str, Any]) -> list[str]:
    """The GPU section: none without GPU telemetry, no energy lines without power."""
    gpu = summary.get("gpu") or {}
    if not gpu:
        return []
    lines = ["{s:{c}^{n}}".format(s=gpu_heading(gpu.get("source")), n=50, c="-")]
    lines.append(_row("GPUs:", gpu.get("gpus")))
    lines.append(_row("Mean GPU utilization (%):", gpu.get("mean_util_pct"), ".1f"))
    lines.append(_row("Max GPU memory used (GiB):", gpu.get("max_mem_used_gib"), ".1f"))
    lines.append(_row("Max GPU power, all GPUs (W):", gpu.get("max_power_w"), ".0f"))
    if summary.get("tokens_per_joule") is not None:
        lines.append(_row("Mean GPU power, all GPUs (W):", gpu.get("mean_power_w"), ".0f"))
        lines.append(_row("GPU energy (Wh):", summary.get("energy_wh"), ".3f"))
        lines.append(_row("Output tokens per joule:", summary["tokens_per_joule"], ".3f"))
    return lines


def _bench_request_rate(schedule: dict[str, Any]) -> float | str:
    """vLLM writes the fixed rate, or "inf"; a ramp adds ``ramp_up_*`` keys instead."""
    rate = schedule.get("rate")
    if schedule.get("kind") in ("constant", "poisson", "gamma", "vllm-constant") and isinstance(rate, (int, float)):
        return float(rate)
    return "inf"


def _has_sessions(header: RunHeader | None) -> bool:
    workload = header.scenario.get("workload") if header is not None else None
    return isinstance(workload, dict) and bool(workload.get("sessions"))


# The per-request lists `vllm bench serve` writes only with --save-detailed (its list,
# vllm/benchmarks/serve.py); `latencies` and `queue_times` it always writes.
DETAILED_KEYS = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors")
# The result JSON's per-request lists, in its key order.
PER_REQUEST_KEYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)


def dump_list(values: Sequence[Any]) -> bytes:
    """A per-request list as JSON. orjson writes floats ~18x faster than ``json``, which
    matters for ``itls`` (every chunk gap of the run); the values read back identical."""
    try:
        return orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY)  # NaN as null
    except TypeError:  # e.g. a lone surrogate in an error text
        return strict_json.dumps(values).encode()


def dumps_bench_result(result: dict[str, Any]) -> bytes:
    """``result`` as strict JSON (a NaN or infinite figure written as null, where vLLM's
    own file writes the bare word NaN that strict parsers reject), with the per-request
    lists encoded by ``dump_list``, those of each class of a mixture too."""

    def encode(key: str, value: Any) -> bytes:
        if key in PER_REQUEST_KEYS:
            return dump_list(value)
        if key == "per_class" and isinstance(value, dict):  # {class: a result of its own}
            return (
                b"{"
                + b", ".join(json.dumps(k).encode() + b": " + dumps_bench_result(v) for k, v in value.items())
                + b"}"
            )
        return strict_json.dumps(value).encode()

    parts = [json.dumps(key).encode() + b": " + encode(key, value) for key, value in result.items()]
    return b"{" + b", ".join(parts) + b"}"


def to_bench_result(
    figures: Summary, header: RunHeader | None, records: Sequence[RequestRecord], *, detailed: bool = False
) -> dict[str, Any]:
    """A result JSON with ``vllm bench serve --save-result``'s fields and units.

    Per-request lists cover every request in ``records`` order (failed ones with
    0 / empty values, as vLLM fills them); times are seconds in the lists and ms in the
    aggregate fields. As vLLM, the lists of ``DETAILED_KEYS`` are written only when
    ``detailed`` (``--save-detailed``); ``generated_texts`` holds each record's
    ``generated_text``, an empty string where it was not kept.
    rampwatch's own figures go under ``rampwatch_*`` keys.
    """
    summary = figures.to_dict()
    endpoint = (header.scenario.get("endpoint") if header else None) or "completions"
    schedule = (header.scenario.get("schedule") if header else None) or {}
    backend = "openai-chat" if endpoint == "chat" else "openai"
    result: dict[str, Any] = {
        "date": None,
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": header.model if header else None,
        "tokenizer_id": (header.options.get("tokenizer") if header else None) or (header.model if header else None),
        "num_prompts": len(records),
        # A session workload's schedule is of sessions (or users), not requests.
        "request_rate": "inf" if _has_sessions(header) else _bench_request_rate(schedule),
        "burstiness": 1.0,
        "max_concurrency": summary.get("max_concurrency"),
    }
    if header is not None:
        import datetime

        result["date"] = datetime.datetime.fromtimestamp(header.started_at_unix).strftime("%Y%m%d-%H%M%S")
    for key in (
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
    ):
        result[key] = summary[key]
    result["rtfx"] = 0.0  # audio real-time factor; always 0 for text
    if schedule.get("kind") in ("linear", "exponential", "vllm-linear", "vllm-exponential"):
        result["ramp_up_strategy"] = schedule["kind"].removeprefix("vllm-")
        result["ramp_up_start_rps"] = schedule.get("start_rps")
        result["ramp_up_end_rps"] = schedule.get("end_rps")
    lists: dict[str, Callable[[], list[Any]]] = {
        "input_lens": lambda: [r.prompt_tokens for r in records],
        "output_lens": lambda: [stats.output_len(r) if r.ok else 0 for r in records],
        "ttfts": lambda: [(r.ttft or 0.0) if r.ok else 0.0 for r in records],
        "itls": lambda: [stats.itl_array(r).tolist() if r.ok else [] for r in records],
        "latencies": lambda: [r.e2e if r.ok else 0.0 for r in records],
        "start_times": lambda: [r.sent_at for r in records],
        "queue_times": lambda: [r.client_queue_s for r in records],
        "generated_texts": lambda: [r.generated_text or "" for r in records],
        "errors": lambda: ["" if r.ok else f"{r.error_class}: {r.error or ''}" for r in records],
    }
    for key in PER_REQUEST_KEYS:  # the detailed lists are not even built without `detailed`
        if detailed or key not in DETAILED_KEYS:
            result[key] = lists[key]()
    for key, value in summary.items():
        parts = key.split("_")
        if len(parts) == 3 and parts[1] in METRICS and parts[2] == "ms":
            result[key] = value
    result["rampwatch_server"] = summary.get("server")
    result["rampwatch_errors_by_class"] = summary.get("errors_by_class")
    result["rampwatch_cancelled"] = summary.get("cancelled", 0)
    result["rampwatch_send_lateness_ms"] = summary.get("send_lateness_ms")
    result["rampwatch_client"] = summary.get("client")
    result["rampwatch_knee_rps"] = summary.get("knee_rps")
    result["rampwatch_knee_explanation"] = summary.get("knee_explanation")
    result["rampwatch_cost"] = {
        "gpu_price_per_hour": summary.get("gpu_price_per_hour"),
        "per_1m_output_tokens": summary.get("cost_per_1m_output_tokens"),
        "per_1m_total_tokens": summary.get("cost_per_1m_total_tokens"),
    }
    result["rampwatch_gpu"] = summary.get("gpu") or None
    result["rampwatch_energy_wh"] = summary.get("energy_wh")
    result["rampwatch_tokens_per_joule"] = summary.get("tokens_per_joule")
    return result
