"""Per-second bins of the request counts, for ``series.SeriesBuilder``.

``Growable`` is the builders' per-second array. ``RequestBins`` keeps the counts per
second: offered and sent from the ticks' running totals (each tick's increase spread over
the time since the previous tick), completed, errors (by class too) and client output
tokens from the records (by ``end_at``), and a session workload's sessions started and
ended per second from the ticks' totals, spread as offered and sent are. A stream whose
ticks carry no totals (older recordings) counts offered by ``scheduled_at`` and sent by
``sent_at`` from the records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from rampwatch.core.timeline import CANCELLED, ERROR_SERIES, RequestRecord, Tick, error_group

SESSION_RATES = ("sessions_started_per_s", "sessions_finished_per_s")


class Growable:
    """A float array indexed by second that grows on demand."""

    __slots__ = ("data", "fill")

    def __init__(self, fill: float, capacity: int = 256) -> None:
        self.fill = fill
        self.data = np.full(capacity, fill, dtype=np.float64)

    @classmethod
    def of(cls, fill: float, data: np.ndarray) -> Growable:
        """One holding ``data`` (a checkpoint's array)."""
        g = cls(fill, capacity=1)
        g.data = np.array(data, dtype=np.float64)
        return g

    def _ensure(self, i: int) -> None:
        if i >= self.data.size:
            size = self.data.size
            while size <= i:
                size *= 2
            grown = np.full(size, self.fill, dtype=np.float64)
            grown[: self.data.size] = self.data
            self.data = grown

    def add(self, i: int, v: float) -> None:
        self._ensure(i)
        self.data[i] += v

    def set(self, i: int, v: float) -> None:
        self._ensure(i)
        self.data[i] = v

    def head(self, n: int) -> np.ndarray:
        self._ensure(max(n - 1, 0))
        return self.data[:n]


def sec(t: float) -> int:
    """The second a run time falls in (the bin index)."""
    return max(0, int(math.floor(t)))


def spread_counts(t0: float, t1: float, deltas: dict[str, int], into: dict[str, Growable]) -> None:
    """Each count's increase over ``(t0, t1]`` spread uniformly over the seconds it covers
    (all in ``t1``'s second when the interval is empty)."""
    if t1 <= t0:
        for name, delta in deltas.items():
            into[name].add(sec(t1), float(delta))
        return
    span = t1 - t0
    for b in range(sec(t0), sec(t1) + 1):
        overlap = min(t1, b + 1.0) - max(t0, float(b))
        if overlap > 0:
            for name, delta in deltas.items():
                into[name].add(b, delta * overlap / span)


class RequestBins:
    """The request and session counts per second; see the module docstring."""

    def __init__(self) -> None:
        self.counts = {
            name: Growable(0.0)
            for name in (
                "offered_rps",
                "sent_rps",
                "completed_rps",
                "error_rps",
                "client_output_tps",
                *ERROR_SERIES.values(),
            )
        }
        # Offered and sent from the ticks' totals, and the last tick's (t, offered, sent).
        self.tick_counts = {name: Growable(0.0) for name in ("offered_rps", "sent_rps")}
        self.tick_totals: tuple[float, int, int] | None = None
        # Sessions started / ended per second from the ticks' totals, and the last totals.
        self.session_counts = {name: Growable(0.0) for name in SESSION_RATES}
        self.session_totals: tuple[float, int, int] = (0.0, 0, 0)

    def add_records(self, records: Sequence[RequestRecord]) -> None:
        c = self.counts
        for record in records:
            c["offered_rps"].add(sec(record.scheduled_at), 1.0)
            c["sent_rps"].add(sec(record.sent_at), 1.0)
            end = sec(record.end_at)
            if record.error_class == CANCELLED:
                pass  # cancelled by the run: neither completed nor failed
            elif record.ok:
                c["completed_rps"].add(end, 1.0)
                c["client_output_tps"].add(end, float(record.completion_tokens))
            else:
                c["error_rps"].add(end, 1.0)
                group = error_group(record.error_class)
                if group is not None:
                    c[ERROR_SERIES[group]].add(end, 1.0)

    def on_tick(self, tick: Tick) -> None:
        prev_t, prev_started, prev_finished = self.session_totals
        if tick.sessions_started_total != prev_started or tick.sessions_finished_total != prev_finished:
            spread_counts(
                prev_t,
                tick.t,
                {
                    "sessions_started_per_s": tick.sessions_started_total - prev_started,
                    "sessions_finished_per_s": tick.sessions_finished_total - prev_finished,
                },
                self.session_counts,
            )
        self.session_totals = (tick.t, tick.sessions_started_total, tick.sessions_finished_total)
        if tick.offered_total is not None and tick.sent_total is not None:
            prev_t, prev_offered, prev_sent = self.tick_totals or (0.0, 0, 0)
            spread_counts(
                prev_t,
                tick.t,
                {
                    "offered_rps": tick.offered_total - prev_offered,
                    "sent_rps": tick.sent_total - prev_sent,
                },
                self.tick_counts,
            )
            self.tick_totals = (tick.t, tick.offered_total, tick.sent_total)

    @property
    def sessions_finished(self) -> int | None:
        """The run's count of sessions that ended, from the last tick of a session
        workload (None in other runs and recordings whose ticks carry no sessions)."""
        _, started, finished = self.session_totals
        return int(finished) if started else None

    def arrays(self, n: int, out: dict[str, np.ndarray]) -> None:
        """The first ``n`` seconds of every count into ``out``."""
        for name, g in self.counts.items():
            out[name] = g.head(n).copy()
        if self.tick_totals is not None:
            for name, g in self.tick_counts.items():
                out[name] = g.head(n).copy()
        for name, g in self.session_counts.items():
            out[name] = g.head(n).copy()
