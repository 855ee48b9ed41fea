"""``SummaryBuilder``: the run's ``Summary`` from blocks of finished requests
(``RequestBlock``).

One builder serves every caller: the end of a live or headless run and ``summarise_requests``
(records in memory), ``rampwatch report``/``export``/``compare`` (a recording fed block
by block, ``record.analysis``) and the live run-so-far figures (``bounded=True``, whose
state a recording's checkpoints keep: ``export_state``/``restore_state``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rampwatch.core.figures import stats
from rampwatch.core.figures.client_lag import ClientFigures
from rampwatch.core.figures.images import ImageCounts, image_figures
from rampwatch.core.figures.phases import PhaseBlock, PhaseTotals
from rampwatch.core.figures.reasoning import ReasoningBlock, ReasoningTotals
from rampwatch.core.figures.run_summary import (
    METRICS,
    LatencyMs,
    SendLatenessMs,
    Summary,
    concurrency_cap,
    knee_explanation,
    knee_rps,
)
from rampwatch.core.figures.summary_server import gpu_figures, gpu_source, server_figures
from rampwatch.core.timeline import CANCELLED, Event, RequestRecord, RunHeader, ServerSample


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
    images: Sequence[int | None] = ()  # each request's image count (None or absent: no images)
    reasoning: ReasoningBlock | None = None  # None: no request of the block reasoned
    phases: PhaseBlock | None = None  # where TTFT went; None: no request has phase marks

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
            images=[r.images for r in records],
            reasoning=ReasoningBlock.from_records(records),
            phases=PhaseBlock.from_records(records),
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
        self.images = ImageCounts()
        # A reasoning model's figures, from the first request that reasoned on (None before)
        self.reasoning: ReasoningTotals | None = None
        # Where TTFT went (core.figures.phases), from the first request with phase marks on
        self.phases: PhaseTotals | None = None

    @property
    def failed(self) -> int:
        return self.requests - self.completed - self.cancelled

    def add(self, record: RequestRecord) -> None:
        self.add_block(RequestBlock.from_records([record]))

    def add_block(self, block: RequestBlock) -> None:
        n = len(block.error_classes)
        if n == 0:
            return
        if block.reasoning is not None and self.reasoning is None:
            self.reasoning = ReasoningTotals.seeded(self.latencies["ttft"], self.latencies["itl"], self.total_output)
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
        if block.images:
            self.images.add(block.images, ok.tolist())
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
        ttfa = ttft if block.reasoning is None else np.nan_to_num(block.reasoning.ttfa_s[ok], nan=math.inf)
        if block.phases is not None:
            if self.phases is None:
                self.phases = PhaseTotals(self.bounded)
            self.phases.add(block.phases)
        if self.reasoning is not None:
            if block.reasoning is not None:
                self.reasoning.add(block.reasoning)
            else:
                self.reasoning.add_plain(int(stats.output_lens(completion).sum()), ttft, block.itls)
        if self.slo:
            tpot_or_zero = np.zeros(ttft.size)
            tpot_or_zero[with_tpot] = tpot
            self.good += int(stats.meets_slo(ttft, tpot_or_zero, e2el, self.slo, ttfa_s=ttfa).sum())
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
            images=image_figures(self.images, header, server or {}),
            reasoning=None if self.reasoning is None else self.reasoning.figures(self.percentiles),
            ttft_phases=None if self.phases is None else self.phases.figures(),
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
        reasoning = {} if self.reasoning is None else {"reasoning": self.reasoning.export_state(arrays, prefix)}
        if self.phases is not None:
            reasoning["ttft_phases"] = self.phases.export_state(arrays, prefix)
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
            **({"images": self.images.state()} if self.images.requests else {}),
            **reasoning,
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
        if "images" in state:
            b.images.restore(state["images"])
        if "reasoning" in state:
            b.reasoning = ReasoningTotals.restore_state(state["reasoning"], arrays, prefix)
        if "ttft_phases" in state:
            b.phases = PhaseTotals.restore_state(state["ttft_phases"], arrays, prefix)
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
