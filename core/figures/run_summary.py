"""The typed run ``Summary`` and the figures it derives (throughputs, costs, energy).

Client figures follow ``core.figures.stats`` (vLLM's definitions). ``Summary.to_dict()`` has
the keys of vLLM's result JSON where vLLM has the figure (``completed``,
``request_throughput``, ``mean_ttft_ms``, ``p99_itl_ms``...), plus ``p50``/``p90`` for every
latency metric, ``send_lateness_ms`` (how late the client sent: ``SendLatenessMs``),
``server`` (figures from ``/metrics``), ``errors_by_class``, ``knee_rps`` and, with a GPU
price, ``cost_per_1m_output_tokens`` / ``cost_per_1m_total_tokens`` (hourly price /
measured tokens per second * 1e6 / 3600). With GPU telemetry (NVML, a
DCGM exporter) ``gpu`` holds the GPU figures (``summary_server.GpuTotals``) and, when power
is known, ``energy_wh`` and ``tokens_per_joule`` (output tokens ÷ the energy the GPUs drew).
A reasoning run adds ``reasoning`` (``core.figures.reasoning.ReasoningFigures.to_dict``:
time to first answer, each phase's ITL, the reasoning share); a plain run has no such key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rampwatch.core.figures.client_lag import ClientFigures
from rampwatch.core.timeline import Event, RunHeader

if TYPE_CHECKING:
    from rampwatch.core.figures.phases import PhaseFigures
    from rampwatch.core.figures.reasoning import ReasoningFigures

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
    # Images per request, their size and the multimodal cache (core.figures.images);
    # None: a run without images.
    images: dict[str, Any] | None = None
    # A reasoning model's figures (time to first answer, each phase's ITL, the reasoning
    # share); None when no request reasoned: nothing of it shows then.
    reasoning: ReasoningFigures | None = None
    # Where TTFT went on the client's side (core.figures.phases); None: no request had
    # phase marks (a recording of an older client's).
    ttft_phases: PhaseFigures | None = None

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
        if self.images is not None:
            out["images"] = self.images
        if self.reasoning is not None:
            out["reasoning"] = self.reasoning.to_dict()
        if self.ttft_phases is not None:
            out["ttft_phases"] = self.ttft_phases.to_dict()
        return out
