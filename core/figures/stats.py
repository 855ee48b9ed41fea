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
SLO_KEYS = ("ttft", "tpot", "e2el", "ttfa")


def output_len(rec: RequestRecord) -> int:
    """Output tokens as ``vllm bench serve`` counts them for a successful request."""
    return rec.completion_tokens or 1


def output_lens(completion_tokens: np.ndarray) -> np.ndarray:
    """``output_len`` of successful requests given their completion tokens."""
    return np.where(completion_tokens == 0, 1, completion_tokens)


def itl_array(rec: RequestRecord) -> np.ndarray:
    """A request's ITLs (the gaps from its first token chunk to each later chunk, as vLLM
    defines them) as a float64 array, without a Python loop over the chunks."""
    if rec.first_token_at is None or not rec.chunk_times:
        return np.empty(0, dtype=np.float64)
    return requests_itls(np.array([rec.first_token_at]), [np.asarray(rec.chunk_times, dtype=np.float64)])


def requests_itls(first_token_at: np.ndarray, chunk_times: Sequence[np.ndarray]) -> np.ndarray:
    """The ITLs of several requests, request after request (``itl_array`` of each,
    concatenated), in one numpy pass: ``first_token_at[i]`` and ``chunk_times[i]`` are
    request i's first token time and later chunk times."""
    lengths = np.fromiter((c.size for c in chunk_times), dtype=np.int64, count=len(chunk_times))
    if not lengths.any():
        return np.empty(0, dtype=np.float64)
    arrivals = np.concatenate(chunk_times)
    previous = np.empty_like(arrivals)
    previous[1:] = arrivals[:-1]
    starts = np.cumsum(lengths) - lengths
    with_chunks = lengths > 0
    previous[starts[with_chunks]] = first_token_at[with_chunks]  # each request's first gap
    return clean_itls(arrivals - previous)


# Times come from a nanosecond clock; a recording keeps them to the microsecond.
ITL_DECIMALS = 9


def clean_itls(gaps: np.ndarray) -> np.ndarray:
    """Gaps between chunk times as ITLs: at the clock's precision (no 1e-16 residue of the
    float subtraction) and never below 0 (two chunks of one read are 0 apart; storing times
    on grids of different steps can otherwise put one a few µs before the other)."""
    return np.maximum(np.round(gaps, ITL_DECIMALS), 0.0)


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


def meets_slo(
    ttft_s: np.ndarray,
    tpot_s: np.ndarray,
    e2el_s: np.ndarray,
    slo_ms: dict[str, float],
    ttfa_s: np.ndarray | None = None,
) -> np.ndarray:
    """Which successful requests meet every SLO (ms) in ``slo_ms`` (``>=`` passes).

    Keys are ``ttft``/``tpot``/``e2el`` as in ``--goodput``, or the scenario's spelling
    ``ttft_ms``/``tpot_ms``/``e2el_ms``. ``tpot_s`` is 0 for requests with <= 1 token.
    ``ttfa`` bounds a reasoning model's time to its first answer token (``ttfa_s``: inf
    for a request cut short while thinking; without it, the TTFT: nothing reasoned)."""
    by_key = {"ttft": ttft_s, "tpot": tpot_s, "e2el": e2el_s, "ttfa": ttft_s if ttfa_s is None else ttfa_s}
    good = np.ones(np.shape(ttft_s), dtype=bool)
    for key, limit in slo_ms.items():
        key = key.removesuffix("_ms")
        value = by_key.get(key)
        if value is None:
            raise ValueError(f"unknown SLO {key!r}: use one of {', '.join(SLO_KEYS)}")
        good &= ~(limit / 1000 < np.asarray(value, dtype=np.float64))
    return good


def max_concurrent(starts: np.ndarray, ends: np.ndarray) -> int:
    """Peak overlap of half-open ``[start, end)`` intervals (ends sort before starts)."""
    starts, ends = np.sort(np.asarray(starts, dtype=np.float64)), np.sort(np.asarray(ends, dtype=np.float64))
    if starts.size == 0:
        return 0
    # The overlap only rises at a start: just after the i-th start, i + 1 have started and
    # those ending at or before it have ended. Two sorted copies, not one sort of every
    # start and end with their steps (a few times the memory, at the end of a long run).
    in_flight = np.arange(1, starts.size + 1) - np.searchsorted(ends, starts, side="right")
    return int(max(0, in_flight.max()))


def per_second_counts(times: np.ndarray, origin: float) -> np.ndarray:
    """How many ``times`` fall in each whole second from ``origin`` (times before it are
    dropped): vLLM's bins for the peak output token throughput."""
    idx = (np.asarray(times, dtype=np.float64) - origin).astype(np.int64)
    idx = idx[idx >= 0]
    return np.bincount(idx) if idx.size else np.zeros(0, dtype=np.int64)


class LogHistogram:
    """Counts of positive durations (s) in log-spaced buckets, ``ratio`` wide.

    Values below ``lo`` land in the first bucket, above ``hi`` in the last. Quantiles
    interpolate linearly inside the bucket holding the rank, like ``np.percentile``
    interpolates between order statistics.
    """

    __slots__ = ("_counts", "_pending", "_pending_arrays", "_pending_n", "total")
    # Pending values are binned at the latest past this many: each binning is one short
    # pause (~0.1 ms), not one long one every few seconds on a live run's event loop.
    MAX_PENDING = 4096
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
        if self._pending_n > self.MAX_PENDING:
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


class MicrosecondCounts:
    """Mean, std and exact linear-interpolated percentiles of durations on the 1 µs grid.

    What a recording's ITLs are (request times are stored to 1 µs, chunk times to a whole
    number of µs), so their exact order statistics come from integer µs counts: a dense
    table below ``DENSE_US`` (32 MB) and the rare longer gaps kept apart, instead of a
    float per chunk (a 1-hour, 100 rps recording holds ~90 M)."""

    DENSE_US = 1 << 22

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
        inside = (us >= 0) & (us < self.DENSE_US)
        small = us[inside]
        if small.size:
            # unique + add, not bincount: one long gap would make bincount allocate and
            # zero an array up to that gap's µs for every block
            seen, counts = np.unique(small, return_counts=True)
            need = int(seen[-1]) + 1
            if need > self.dense.size:
                grown = np.zeros(min(self.DENSE_US, max(need, 2 * self.dense.size)), dtype=np.int64)
                grown[: self.dense.size] = self.dense
                self.dense = grown
            self.dense[seen] += counts
        if small.size < us.size:
            self.outliers.append(us[~inside])

    def describe_ms(self, percentiles) -> dict[str, float]:
        if self.n == 0:
            return describe_ms([], percentiles)
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
            out[f"p{percentile_word(p)}"] = percentile(p) * 1000
        return out


class ExactValues:
    """Every value kept: ``describe_ms`` exactly as vLLM computes it (numpy, in the order
    the values were added, so means and stds match a single list bit for bit)."""

    # Added arrays are joined by this many: a long run read back block by block adds
    # thousands of arrays of a few dozen values, whose headers and the heap holes left
    # between them took more memory than the values.
    JOIN = 256

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []  # the joined runs first, then the newest arrays
        self._joined = 0

    def add(self, values: np.ndarray) -> None:
        if values.size:
            self.parts.append(values)
            if len(self.parts) - self._joined >= self.JOIN:
                self.parts[self._joined :] = [np.concatenate(self.parts[self._joined :])]
                self._joined += 1

    @property
    def n(self) -> int:
        """How many values it holds (as ``RunningValues.n`` and ``MicrosecondCounts.n``)."""
        return sum(part.size for part in self.parts)

    def values(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.empty(0, dtype=np.float64)

    def describe_ms(self, percentiles) -> dict[str, float]:
        return describe_ms(self.values(), percentiles)


def running_sum(start: float, values: np.ndarray) -> float:
    """``start + values[0] + values[1] + ...``, added one at a time from the left: the same
    float however the values are split between calls (``np.sum`` sums pairwise, so its
    result depends on where a batch starts and ends)."""
    terms = np.empty(values.size + 1, dtype=np.float64)
    terms[0] = start
    terms[1:] = values
    return float(np.add.accumulate(terms)[-1])


class RunningValues:
    """Bounded memory for the live run-so-far figures: exact mean and std from running
    sums, median and percentiles from a ``LogHistogram`` (within a 1% bucket).

    The sums add value after value (``running_sum``), so feeding requests one at a time
    or in batches of any size gives the same floats: the live builder batches them."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self.squares = 0.0
        self.hist = LogHistogram()

    def add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        self.n += int(values.size)
        self.total = running_sum(self.total, values)
        self.squares = running_sum(self.squares, np.square(values))
        self.hist.add(values)

    def describe_ms(self, percentiles) -> dict[str, float]:
        n = self.n
        mean = self.total / n if n else 0.0
        std = math.sqrt(max(0.0, self.squares / n - mean * mean)) if n else 0.0
        qs = [p / 100 for p in percentiles]
        values = self.hist.quantiles([0.5, *qs]) if n else [0.0] * (1 + len(qs))
        out = {"mean": mean * 1000, "median": values[0] * 1000, "std": std * 1000}
        for p, v in zip(percentiles, values[1:]):
            out[f"p{percentile_word(p)}"] = v * 1000
        return out
