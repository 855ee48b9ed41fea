"""The client's own timing as figures: the lag histogram of its event loops, its
collections and CPU wait (``ClientCounts``), and ``ClientTotals``, which folds ticks'
self-check fields into the run's ``ClientFigures`` (live and read back alike)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

GC_POLICIES = ("load", "python")  # the first is the default (also for an empty value)

# Lag histogram: bucket 0 holds lags under LAG_BASE_MS, bucket i ≥ 1 the lags in
# [LAG_BASE_MS·r^(i-1), LAG_BASE_MS·r^i), r = LAG_BUCKET_RATIO; a percentile is read as
# its bucket's geometric middle: within 5 %, which is finer than the loop's timers.
LAG_BASE_MS = 0.01
LAG_BUCKET_RATIO = 1.1
_LOG_RATIO = math.log(LAG_BUCKET_RATIO)
# The last bucket: a day's lag and more (bucket 230); a bucket past it is a damaged file.
MAX_LAG_BUCKET = 1 + int(math.log(86_400_000 / LAG_BASE_MS) / _LOG_RATIO)

# The summary warns of a TTFT or ITL p99 when the client's lag p99 passes this, or 5 % of
# that p99 when larger: a p99 can hold up to the lag p99 of the client's own delay (see
# ``summary.client_lag_warning``). Measured against the simulator's own write times
# (docs/benchmarks.md), single ITLs moved by up to the lag p99, their p99 by less.
CLIENT_LAG_FLOOR_MS = 1.0
CLIENT_LAG_SHARE = 0.05
# A loop thread that waited for a CPU this share of its busy time (or more) was starved
# by the machine rather than held by its own work.
CPU_STARVED_PCT = 20.0
# The live screen names the client's lag once a second's worst passes this.
LIVE_LAG_BOUND_MS = 20.0


def lag_bucket(lag_ms: float) -> int:
    """The histogram bucket of a lag of ``lag_ms`` (a day or more: the last one)."""
    if lag_ms < LAG_BASE_MS:
        return 0
    return min(MAX_LAG_BUCKET, 1 + int(math.log(lag_ms / LAG_BASE_MS) / _LOG_RATIO))


def bucket_ms(bucket: int) -> float:
    """The lag a bucket stands for: its geometric middle (0 for the lowest bucket)."""
    if bucket <= 0:
        return 0.0
    return LAG_BASE_MS * LAG_BUCKET_RATIO ** (min(bucket, MAX_LAG_BUCKET) - 0.5)


@dataclass
class LagHistogram:
    """Lag samples by bucket, with the exact largest one."""

    counts: dict[int, int] = field(default_factory=dict)
    max_ms: float = 0.0

    @property
    def n(self) -> int:
        return sum(self.counts.values())

    def add(self, lag_ms: float) -> None:
        b = lag_bucket(lag_ms)
        self.counts[b] = self.counts.get(b, 0) + 1
        self.max_ms = max(self.max_ms, lag_ms)

    def merge(self, pairs: Iterable[Iterable[int]], max_ms: float) -> None:
        for bucket, count in pairs:
            self.counts[int(bucket)] = self.counts.get(int(bucket), 0) + int(count)
        self.max_ms = max(self.max_ms, float(max_ms))

    def pairs(self) -> list[list[int]]:
        """``[[bucket, count], …]``, as a tick carries them (JSON)."""
        return [[b, c] for b, c in sorted(self.counts.items())]

    def percentile_ms(self, q: float) -> float | None:
        """The lag at percentile ``q`` (0-100); None without samples. Never above the max."""
        n = self.n
        if n == 0:
            return None
        rank = q / 100.0 * n
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return min(bucket_ms(bucket), self.max_ms)
        return self.max_ms


def _count(value: Any) -> int | None:
    """A count read back from a tick: a whole number ≥ 0, else None (a damaged file)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _ms(value: Any) -> float | None:
    """Milliseconds read back from a tick: a finite number ≥ 0, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def lag_pairs(value: Any) -> list[tuple[int, int]] | None:
    """A tick's ``loop_lag`` as ``(bucket, count)`` pairs, or None when it is not that (a
    damaged or hostile file: a report reads past it rather than fail or loop on it)."""
    if not isinstance(value, list):
        return None
    pairs = []
    for item in value:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            return None
        bucket, count = _count(item[0]), _count(item[1])
        if bucket is None or count is None or bucket > MAX_LAG_BUCKET:
            return None
        pairs.append((bucket, count))
    return pairs


@dataclass
class ClientCounts:
    """What a process's load loop cost so far: collections by generation and their longest
    and total pause (wall clock), the loop thread's CPU time and its time waiting for a
    CPU (None: unknown), and the GC policy in force; one process's or added up."""

    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    max_pause_ms: float = 0.0
    total_pause_ms: float = 0.0
    cpu_ms: float | None = None
    cpu_wait_ms: float | None = None
    gc_policy: str = "load"

    def merge(self, other: ClientCounts) -> None:
        self.collections = [a + b for a, b in zip(self.collections, other.collections, strict=True)]
        self.max_pause_ms = max(self.max_pause_ms, other.max_pause_ms)
        self.total_pause_ms += other.total_pause_ms
        if other.cpu_ms is not None and other.cpu_wait_ms is not None:
            self.cpu_ms = (self.cpu_ms or 0.0) + other.cpu_ms
            self.cpu_wait_ms = (self.cpu_wait_ms or 0.0) + other.cpu_wait_ms
        self.gc_policy = other.gc_policy

    def to_dict(self) -> dict[str, Any]:
        return {
            "collections": list(self.collections),
            "max_pause_ms": self.max_pause_ms,
            "total_pause_ms": self.total_pause_ms,
            "cpu_ms": self.cpu_ms,
            "cpu_wait_ms": self.cpu_wait_ms,
            "gc_policy": self.gc_policy,
        }

    @classmethod
    def from_dict(cls, d: Any) -> ClientCounts:
        """Read back leniently: what is not a count or a duration is left at its default."""
        d = d if isinstance(d, dict) else {}
        collections = d.get("collections")
        counts = [_count(c) for c in collections] if isinstance(collections, list) else []
        policy = d.get("gc_policy")
        return cls(
            [c or 0 for c in counts] if len(counts) == 3 else [0, 0, 0],
            _ms(d.get("max_pause_ms")) or 0.0,
            _ms(d.get("total_pause_ms")) or 0.0,
            _ms(d.get("cpu_ms")),
            _ms(d.get("cpu_wait_ms")),
            policy if policy in GC_POLICIES else "load",
        )

    @property
    def cpu_wait_pct(self) -> float | None:
        """The share of the time the loop had work that it waited for a CPU (%)."""
        if self.cpu_ms is None or self.cpu_wait_ms is None or self.cpu_ms + self.cpu_wait_ms <= 0:
            return None
        return 100.0 * self.cpu_wait_ms / (self.cpu_ms + self.cpu_wait_ms)


def _shown(ms: float | None) -> float | None:
    """A lag read from its bucket, to the 0.01 ms (the bucket is ±5 %: more digits say
    nothing)."""
    return None if ms is None else round(ms, 2)


@dataclass(frozen=True)
class ClientFigures:
    """The run's self-check as the summary shows it: the stream-reading loops' lag (ms),
    their collections during the load, and how much of their busy time they waited for
    a CPU (None: unknown)."""

    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None
    lag_samples: int
    gc_collections: tuple[int, int, int]
    gc_max_pause_ms: float
    cpu_wait_pct: float | None = None
    gc_policy: str = "load"

    def to_dict(self) -> dict[str, Any]:
        return {
            "loop_lag_p50_ms": self.lag_p50_ms,
            "loop_lag_p99_ms": self.lag_p99_ms,
            "loop_lag_max_ms": self.lag_max_ms,
            "loop_lag_samples": self.lag_samples,
            "gc_collections": list(self.gc_collections),
            "gc_max_pause_ms": self.gc_max_pause_ms,
            "cpu_wait_pct": self.cpu_wait_pct,
            "gc_policy": self.gc_policy,
        }


class ClientTotals:
    """Folds ticks' self-check fields into the run's ``ClientFigures`` (the live
    run-so-far summary and the read-back of a recording fold the same ticks). A tick
    whose fields are not what a run writes (a damaged file) adds nothing of them."""

    def __init__(self) -> None:
        self.lag = LagHistogram()
        self.counts = ClientCounts()
        self.seen = False

    def add(self, loop_lag: Any, loop_lag_max_ms: Any, client_counts: Any) -> None:
        pairs = lag_pairs(loop_lag)
        if pairs is not None:
            self.seen = True
            self.lag.merge(pairs, _ms(loop_lag_max_ms) or 0.0)
        if isinstance(client_counts, dict):
            self.seen = True
            self.counts = ClientCounts.from_dict(client_counts)  # cumulative: the newest stands

    def figures(self) -> ClientFigures | None:
        """None for a recording made before the self-check."""
        if not self.seen:
            return None
        c = self.counts.collections
        wait = self.counts.cpu_wait_pct
        return ClientFigures(
            _shown(self.lag.percentile_ms(50)),
            _shown(self.lag.percentile_ms(99)),
            self.lag.max_ms if self.lag.n else None,
            self.lag.n,
            (int(c[0]), int(c[1]), int(c[2])),
            self.counts.max_pause_ms,
            None if wait is None else round(wait, 1),
            self.counts.gc_policy,
        )

    def export_state(self) -> dict[str, Any] | None:
        """JSON-able state for a series checkpoint; ``restore_state`` reads it back."""
        if not self.seen:
            return None
        return {"lag": self.lag.pairs(), "lag_max_ms": self.lag.max_ms, "counts": self.counts.to_dict()}

    @classmethod
    def restore_state(cls, state: dict[str, Any] | None) -> ClientTotals:
        totals = cls()
        if isinstance(state, dict):
            totals.add(state.get("lag"), state.get("lag_max_ms"), state.get("counts"))
        return totals


def client_figures(ticks: Iterable[Any]) -> ClientFigures | None:
    """The run's self-check from its ticks (``core.timeline.Tick``), in time order."""
    totals = ClientTotals()
    for tick in ticks:
        totals.add(tick.loop_lag, tick.loop_lag_max_ms, tick.client_counts)
    return totals.figures()
