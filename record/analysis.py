"""Whole-recording figures shared by report, export and compare.

``summarise`` streams the recording block by block on numpy arrays instead of building a
``RequestRecord`` (and a Python float per chunk) for every request: a 1-hour, 100 rps
recording holds ~90 M chunk times, which as Python objects need gigabytes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from rampwatch.core.timeline import Snapshot
from rampwatch.record import format as fmt
from rampwatch.record.reader import Recording
from rampwatch.record.replay import feed

# ITLs read back from a file lie on the 1 µs grid (request times are stored to 1 µs, chunk
# times to a whole number of µs), so exact order statistics come from integer µs counts:
# a dense table below this bound (32 MB) and the rare longer gaps kept apart.
_ITL_DENSE_US = 1 << 22


def benchmark_duration(recording: Recording, records: list | None = None) -> float:
    """First send to last completion, as ``vllm bench serve`` measures it."""
    if records is None:
        columns = [recording.request_columns(f, with_chunks=False) for f in recording.request_frames]
        if not any(c.n for c in columns):
            return recording.duration_s
        return float(max(c.end_at.max() for c in columns if c.n) - min(c.sent_at.min() for c in columns if c.n))
    if not records:
        return recording.duration_s
    return max(r.end_at for r in records) - min(r.sent_at for r in records)


def summarise(recording: Recording, records: list | None = None, **options: Any) -> dict[str, Any]:
    """``loadgen.summary.compute_summary`` of the recording. Without ``records`` the
    requests are streamed (same figures; ITL percentiles from exact µs order statistics)."""
    from rampwatch.loadgen.summary import compute_summary

    # The run's own SLOs and GPU price, so a report matches the summary printed live.
    header = recording.header
    if header is not None:
        options.setdefault("slo", (header.scenario or {}).get("slo") or None)
        options.setdefault("gpu_price_per_hour", (header.options or {}).get("gpu_price_per_hour"))
    if records is not None:
        return compute_summary(recording.header, records, recording.samples, recording.events,
                               benchmark_duration(recording, records), **options)
    return stream_summary(recording, **options)


class _ItlAccumulator:
    """Mean, std and exact linear-interpolated percentiles of µs-grid durations."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self.squares = 0.0
        self.dense = np.zeros(0, dtype=np.int64)
        self.outliers: list[np.ndarray] = []

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.n += int(values.size)
        self.total += float(values.sum())
        self.squares += float(np.square(values).sum())
        us = np.rint(values * 1e6).astype(np.int64)
        inside = (us >= 0) & (us < _ITL_DENSE_US)
        small = us[inside]
        if small.size:
            # unique + add, not bincount: one long gap would make bincount allocate and
            # zero an array up to that gap's µs for every block
            seen, counts = np.unique(small, return_counts=True)
            need = int(seen[-1]) + 1
            if need > self.dense.size:
                grown = np.zeros(min(_ITL_DENSE_US, max(need, 2 * self.dense.size)), dtype=np.int64)
                grown[: self.dense.size] = self.dense
                self.dense = grown
            self.dense[seen] += counts
        if small.size < us.size:
            self.outliers.append(us[~inside])

    def describe_ms(self, percentiles) -> dict[str, float]:
        from rampwatch.loadgen import stats

        if self.n == 0:
            return stats.describe_ms([], percentiles)
        values = np.flatnonzero(self.dense)
        counts = self.dense[values]
        if self.outliers:
            extra, extra_counts = np.unique(np.concatenate(self.outliers), return_counts=True)
            merged = np.concatenate([values, extra])
            order = np.argsort(merged, kind="stable")
            values, counts = merged[order], np.concatenate([counts, extra_counts])[order]
        cum = np.cumsum(counts)

        def order_stat(k: int) -> float:
            return float(values[int(np.searchsorted(cum, k, side="right"))]) / 1e6

        def percentile(p: float) -> float:
            rank = p / 100 * (self.n - 1)
            below = int(np.floor(rank))
            lo, hi = order_stat(below), order_stat(min(below + 1, self.n - 1))
            return lo + (hi - lo) * (rank - below)

        mean = self.total / self.n
        out = {
            "mean": mean * 1000,
            "median": percentile(50) * 1000,
            "std": float(np.sqrt(max(0.0, self.squares / self.n - mean * mean))) * 1000,
        }
        for p in percentiles:
            out[f"p{stats.percentile_word(p)}"] = percentile(p) * 1000
        return out


def _block_itls(c: fmt.RequestColumns, ok: np.ndarray) -> np.ndarray:
    """ITLs of the block's successful requests with a first token (``RequestRecord.itls``)."""
    assert c.chunk_times is not None, "read with_chunks=True"
    counts = c.n_chunks.astype(np.int64)
    use = ok & c.has_first & (counts > 0)
    if not use.any():
        return np.zeros(0)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    owner = np.repeat(use, counts)
    prev = np.empty_like(c.chunk_times)
    prev[1:] = c.chunk_times[:-1]
    prev[starts[counts > 0]] = c.first_token_at[counts > 0]
    return (c.chunk_times - prev)[owner]


def stream_summary(recording: Recording, slo: dict[str, float] | None = None,
                   gpu_price_per_hour: float | None = None, percentiles=None) -> dict[str, Any]:
    from rampwatch.loadgen import stats
    from rampwatch.loadgen.summary import _cost, knee_rps, server_figures

    percentiles = stats.PERCENTILES if percentiles is None else percentiles
    frames = recording.request_frames
    # Pass 1, scalars only: what the per-chunk pass needs to know in advance.
    scal = [recording.request_columns(f, with_chunks=False) for f in frames]
    scal = [c for c in scal if c.n]

    def cat(name: str) -> np.ndarray:
        return np.concatenate([getattr(c, name) for c in scal]) if scal else np.zeros(0)

    ok_parts = [np.array([e is None for e in c.strings["error_class"]], dtype=bool) for c in scal]
    ok = np.concatenate(ok_parts) if ok_parts else np.zeros(0, dtype=bool)
    sched, sent, end, first = cat("scheduled_at"), cat("sent_at"), cat("end_at"), cat("first_token_at")
    has_first = cat("has_first").astype(bool)
    prompt = cat("prompt_tokens").astype(np.int64)
    completion = cat("completion_tokens").astype(np.int64)
    flags = cat("flags").astype(np.uint8)
    duration = float(end.max() - sent.min()) if end.size else recording.duration_s
    dur = max(duration, 1e-9)

    o_sent, o_end, o_first, o_has = sent[ok], end[ok], first[ok], has_first[ok]
    out_lens = np.where(completion[ok] == 0, 1, completion[ok])
    total_input = int(prompt[ok].sum())
    total_output = int(out_lens.sum())
    ttfts = np.where(o_has, o_first - o_sent, 0.0)
    ttfts = np.where(ttfts == 0.0, 0.0, ttfts)  # `ttft or 0.0`
    e2els = o_end - o_sent
    with_tpot = o_has & (completion[ok] > 1)
    tpots = (o_end[with_tpot] - o_first[with_tpot]) / (completion[ok][with_tpot] - 1)

    # Pass 2, chunk times block by block.
    itls = _ItlAccumulator()
    peak_start = float(o_sent[o_has].min()) if o_has.any() else 0.0
    peak_end = float(o_end[o_has].max()) if o_has.any() else 0.0
    n_bins = int(np.ceil(peak_end - peak_start)) + 1
    per_second = np.zeros(n_bins, dtype=np.int64)
    for f, c_ok in zip((f for f in frames if f.count), ok_parts):
        c = recording.request_columns(f, with_chunks=True)
        assert c.chunk_times is not None
        itls.add(_block_itls(c, c_ok))
        use = c_ok & c.has_first
        if use.any():
            times = np.concatenate([c.first_token_at[use], c.chunk_times[np.repeat(use, c.n_chunks.astype(np.int64))]])
            idx = (times - peak_start).astype(np.int64)
            idx = idx[(idx >= 0) & (idx < n_bins)]
            per_second += np.bincount(idx, minlength=n_bins)

    order = np.lexsort((np.concatenate([np.ones(o_sent.size), -np.ones(o_end.size)]), np.concatenate([o_sent, o_end])))
    deltas = np.concatenate([np.ones(o_sent.size, dtype=np.int64), -np.ones(o_end.size, dtype=np.int64)])[order]
    peak_concurrent = int(max(0, np.cumsum(deltas).max())) if deltas.size else 0

    header = recording.header
    summary: dict[str, Any] = {
        "duration": duration,
        "completed": int(ok.sum()),
        "failed": int((~ok).sum()),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": int(ok.sum()) / dur,
        "request_goodput": None,
        "output_throughput": total_output / dur,
        "total_token_throughput": (total_input + total_output) / dur,
        "max_output_tokens_per_s": float(per_second.max()) if o_has.any() and per_second.size else 0.0,
        "max_concurrent_requests": peak_concurrent,
        "max_concurrency": header.options.get("max_concurrency") if header else None,
        "tokens_from_usage": bool(np.all(flags[ok] & 1)),
    }
    if slo:
        good = np.ones(ok.sum(), dtype=bool)
        tpot_all = np.zeros(ok.sum())
        tpot_all[with_tpot] = tpots
        for key, limit in slo.items():
            key = key.removesuffix("_ms")
            value = {"ttft": ttfts, "tpot": tpot_all, "e2el": e2els}.get(key)
            if value is None:
                raise ValueError(f"unknown SLO {key!r}: use one of {', '.join(stats.SLO_KEYS)}")
            good &= ~(limit / 1000 < value)
        summary["request_goodput"] = int(good.sum()) / dur
        summary["slo_ms"] = dict(slo)
    described = {"ttft": stats.describe_ms(ttfts, percentiles), "tpot": stats.describe_ms(tpots, percentiles),
                 "itl": itls.describe_ms(percentiles), "e2el": stats.describe_ms(e2els, percentiles)}
    for name, figures in described.items():
        for key, value in figures.items():
            summary[f"{key}_{name}_ms"] = value
    queue = np.maximum(0.0, sent - sched)
    summary["mean_client_queue_ms"] = float(np.mean(queue if queue.size else np.zeros(1))) * 1000
    errors = Counter(e for c in scal for e in c.strings["error_class"] if e is not None)
    summary["errors_by_class"] = dict(sorted(errors.items()))
    summary["server"] = server_figures(recording.samples)
    summary["knee_rps"] = knee_rps(recording.events)
    summary["gpu_price_per_hour"] = gpu_price_per_hour
    summary["cost_per_1m_output_tokens"] = _cost(gpu_price_per_hour, summary["output_throughput"])
    summary["cost_per_1m_total_tokens"] = _cost(gpu_price_per_hour, summary["total_token_throughput"])
    return summary


def final_snapshot(recording: Recording) -> Snapshot:
    """The series of the whole run, as the live UI showed them at the end."""
    from rampwatch.loadgen.series import SeriesBuilder

    stored = recording.checkpoint(recording.duration_s) if recording.checkpoint_frames else None
    if stored is not None:  # the last stored state, plus what follows it
        t0, state, arrays = stored
        builder = SeriesBuilder.from_state(recording.header, state, arrays)
    else:
        t0 = float("-inf")
        builder = SeriesBuilder()
        builder.on_start(recording.header)
    feed(builder, recording.items_between(t0, recording.duration_s))
    if recording.finished:
        builder.on_finish(recording.duration_s)
    return builder.snapshot(now=recording.duration_s)
