"""The sweep's early stop: a sink that stops a configuration's load once its knee is past
and the requests that ended lately break the SLO."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from rampwatch.app.sweep.spec import EarlyStop
from rampwatch.core.figures.slo import Slo
from rampwatch.core.figures.sweep import slo_breaks
from rampwatch.core.timeline import CANCELLED, Event, NullSink, RequestRecord, Tick


class EarlyStopRule(NullSink):
    """A run's sink that calls ``on_stop(reason)`` once, at the first tick after the knee
    event at which the requests that ended in the last ``window_s`` seconds (at least
    ``min_requests`` of them, cancelled ones aside) break the SLO: a latency percentile
    over its bound (TTFT and ITL of the successful ones) or the failed fraction over the
    SLO's error rate. Before the knee nothing stops the run: a slow start is not a knee."""

    def __init__(self, slo: Slo, rule: EarlyStop, on_stop: Callable[[str], None]) -> None:
        self.slo, self.rule, self.on_stop = slo, rule, on_stop
        self._ended: deque[tuple[float, RequestRecord]] = deque()
        self.knee_at: float | None = None
        self.reason: str | None = None

    def on_request(self, record: RequestRecord) -> None:
        if record.error_class != CANCELLED:
            self._ended.append((record.end_at, record))

    def on_event(self, event: Event) -> None:
        if event.kind == "knee" and self.knee_at is None:
            self.knee_at = event.t

    def on_tick(self, tick: Tick) -> None:
        if not self.rule.enabled or self.reason is not None:
            return
        while self._ended and self._ended[0][0] < tick.t - self.rule.window_s:
            self._ended.popleft()
        if self.knee_at is None:
            return
        reason = self.check([r for _, r in self._ended])
        if reason is not None:
            self.reason = reason
            self.on_stop(reason)

    def check(self, window: Sequence[RequestRecord]) -> str | None:
        """Why these requests break the SLO (None: they meet it, or are too few)."""
        if len(window) < self.rule.min_requests:
            return None
        broken = slo_breaks(window, self.slo)
        if not broken:
            return None
        return f"past the knee, the last {self.rule.window_s:g} s break the SLO: " + "; ".join(broken)
