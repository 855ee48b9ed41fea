"""Latency statistics defined exactly as ``vllm bench serve`` defines them.

From ``vllm/benchmarks/serve.py`` (``calculate_metrics``), for *successful* requests:

- TTFT = first token chunk - send; E2EL ("latency") = last token chunk - send;
- ITL = every gap between successive token chunks, pooled over all requests;
- TPOT = (E2EL - TTFT) / (output_tokens - 1), only for requests with > 1 output token
  (``RequestRecord.tpot``; for goodput a request with <= 1 token counts TPOT = 0);
- output tokens = ``usage.completion_tokens``; when that is 0/missing vLLM falls back to
  a tokenizer, else to 1 — here the client already applied its fallback tokenizer, so
  a remaining 0 becomes 1 as in vLLM;
- mean / median / std / percentiles use numpy (``np.percentile``, linear
  interpolation), over ``values or 0`` (an empty list reports 0), in milliseconds;
- goodput counts requests whose every SLO (ms) is ``>=`` the request's value.

``LogHistogram`` is the bounded-memory alternative used for live figures: log-spaced
buckets 1% wide, so its quantiles are within about one bucket (1%) of the exact ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from rampwatch.core.timeline import RequestRecord

PERCENTILES = (50, 90, 99)
SLO_KEYS = ("ttft", "tpot", "e2el")


def output_len(rec: RequestRecord) -> int:
    """Output tokens as ``vllm bench serve`` counts them for a successful request."""
    return rec.completion_tokens or 1


def itl_array(rec: RequestRecord) -> np.ndarray:
    """``rec.itls()`` as a float64 array (the same values: each gap is the same float
    subtraction), without a Python loop over the chunks."""
    chunks = rec.chunk_times
    if rec.first_token_at is None or not chunks:
        return np.empty(0, dtype=np.float64)
    times = np.empty(len(chunks) + 1, dtype=np.float64)
    times[0] = rec.first_token_at
    times[1:] = chunks
    return times[1:] - times[:-1]


def describe_ms(values_s: Sequence[float] | np.ndarray, percentiles: Iterable[float] = PERCENTILES) -> dict[str, float]:
    """``mean``, ``median``, ``std`` and ``p<N>`` in ms, as vLLM computes them."""
    arr = np.asarray(values_s, dtype=np.float64)
    if arr.size == 0:
        arr = np.zeros(1)
    out = {
        "mean": float(np.mean(arr)) * 1000,
        "median": float(np.median(arr)) * 1000,
        "std": float(np.std(arr)) * 1000,
    }
    for p in percentiles:
        out[f"p{percentile_word(p)}"] = float(np.percentile(arr, p)) * 1000
    return out


def percentile_word(p: float) -> str:
    """99 -> "99", 99.9 -> "99.9" (vLLM's key spelling)."""
    return str(int(p)) if int(p) == p else str(p)


def is_good(rec: RequestRecord, slo_ms: dict[str, float]) -> bool:
    """Whether a successful request meets every SLO (ms) in ``slo_ms``.

    Keys are ``ttft``/``tpot``/``e2el`` as in ``--goodput``, or the scenario's spelling
    ``ttft_ms``/``tpot_ms``/``e2el_ms``."""
    for key, limit in slo_ms.items():
        key = key.removesuffix("_ms")
        if key == "ttft":
            value = rec.ttft or 0.0
        elif key == "tpot":
            value = rec.tpot or 0.0
        elif key == "e2el":
            value = rec.e2e
        else:
            raise ValueError(f"unknown SLO {key!r}: use one of {', '.join(SLO_KEYS)}")
        if limit / 1000 < value:
            return False
    return True


def max_concurrent(intervals: Iterable[tuple[float, float]]) -> int:
    """Peak overlap of half-open ``[start, end)`` intervals (ends sort before starts)."""
    events: list[tuple[float, int]] = []
    for start, end in intervals:
        events.append((start, 1))
        events.append((end, -1))
    events.sort()
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def peak_chunks_per_second(records: Sequence[RequestRecord]) -> float:
    """vLLM's "peak output token throughput": token *chunks* per 1-s bucket from the
    first successful send, maximised (vLLM builds it from TTFT and ITLs, i.e. chunks)."""
    ok = [r for r in records if r.ok and r.first_token_at is not None]
    if not ok:
        return 0.0
    start = min(r.sent_at for r in ok)
    end = max(r.end_at for r in ok)
    n = int(math.ceil(end - start)) + 1
    times = np.concatenate([np.asarray([r.first_token_at for r in ok], dtype=np.float64),
                            *(np.asarray(r.chunk_times, dtype=np.float64) for r in ok)])
    idx = (times - start).astype(np.int64)
    idx = idx[(idx >= 0) & (idx < n)]
    return float(np.bincount(idx, minlength=n).max()) if idx.size else 0.0


class LogHistogram:
    """Counts of positive durations (s) in log-spaced buckets, ``ratio`` wide.

    Values below ``lo`` land in the first bucket, above ``hi`` in the last. Quantiles
    interpolate linearly inside the bucket holding the rank, like ``np.percentile``
    interpolates between order statistics.
    """

    __slots__ = ("_counts", "_pending", "_pending_arrays", "_pending_n", "total")
    LO = 1e-5
    HI = 1e4
    RATIO = 1.01
    _LOG_RATIO = math.log(RATIO)
    N = int(math.ceil(math.log(HI / LO) / _LOG_RATIO))
    EDGES = LO * RATIO ** np.arange(N + 1)

    def __init__(self) -> None:
        self._counts = np.zeros(self.N, dtype=np.int64)
        # Values are binned lazily, in one numpy pass, when counts are read: scalars
        # queue as floats, arrays (a request's ITLs) as arrays, so adding never loops
        # in Python over a request's chunks.
        self._pending: list[float] = []
        self._pending_arrays: list[np.ndarray] = []
        self._pending_n = 0
        self.total = 0

    def add(self, values: Iterable[float] | np.ndarray) -> None:
        if isinstance(values, np.ndarray):
            n = values.size
            if n == 0:
                return
            if values.dtype != np.float64 or values.ndim != 1:
                values = values.astype(np.float64).ravel()
            self._pending_arrays.append(values)
        else:
            before = len(self._pending)
            self._pending.extend(values)
            n = len(self._pending) - before
        self.total += n
        self._pending_n += n
        if self._pending_n > 65536:  # bound the buffer between reads
            _ = self.counts  # reading folds the pending values into the buckets

    @classmethod
    def bucket_index(cls, values: np.ndarray) -> np.ndarray:
        """The bucket of each value (clamped into the end buckets)."""
        arr = np.asarray(values, dtype=np.float64)
        idx = np.floor(np.log(np.maximum(arr, cls.LO) / cls.LO) / cls._LOG_RATIO).astype(np.int64)
        np.clip(idx, 0, cls.N - 1, out=idx)
        return idx

    @property
    def counts(self) -> np.ndarray:
        if self._pending_n:
            parts = self._pending_arrays
            if self._pending:
                parts = [*parts, np.asarray(self._pending, dtype=np.float64)]
            arr = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self._pending = []
            self._pending_arrays = []
            self._pending_n = 0
            self._counts += np.bincount(self.bucket_index(arr), minlength=self.N)
        return self._counts

    def merge(self, other: LogHistogram) -> None:
        self._counts += other.counts
        self.total += other.total

    @classmethod
    def sum(cls, hists: Iterable[LogHistogram]) -> LogHistogram:
        out = cls()
        for h in hists:
            out.merge(h)
        return out

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """Quantiles (0..1) in seconds; NaN when empty."""
        if self.total == 0:
            return [math.nan] * len(qs)
        counts = self.counts
        cum = np.cumsum(counts)

        def value_at(k: int) -> float:
            # the k-th smallest value (0-based), placed evenly inside its bucket
            i = min(int(np.searchsorted(cum, k, side="right")), self.N - 1)
            before = int(cum[i - 1]) if i > 0 else 0
            frac = (k - before + 0.5) / max(int(counts[i]), 1)
            lo, hi = self.EDGES[i], self.EDGES[i + 1]
            return float(lo + (hi - lo) * min(max(frac, 0.0), 1.0))

        out = []
        for q in qs:
            rank = q * (self.total - 1)  # np.percentile's linear method on order statistics
            below = int(math.floor(rank))
            low = value_at(below)
            high = value_at(min(below + 1, self.total - 1))
            out.append(low + (high - low) * (rank - below))
        return out
