"""Online detection of the knee: the offered rate beyond which the server stops keeping up.

``KneeDetector.update(t, values)`` takes one completed second of the 1-second series
(``SeriesBuilder.take_completed_seconds``) and looks at four signals, each judged over
the last ``window_s`` seconds:

- ``throughput_lag`` (client): completed + failed requests fall below
  ``lag_ratio`` x the offered rate (the schedule's ``target_rps`` when ticks carry it,
  because records — hence ``offered_rps`` — only arrive when requests end);
- ``ttft_rise`` (client): TTFT p50 exceeds ``ttft_factor`` x its lowest windowed value
  so far, and by at least ``ttft_min_rise_s``;
- ``queue_growth`` (server): the waiting queue is at least ``min_waiting`` and its
  least-squares slope is above ``queue_slope`` requests per second;
- ``kv_pressure`` (server): KV usage at or above ``kv_full_pct`` with preemptions in
  the window.

The knee is declared when at least ``min_signals`` signals (2 by default) hold
together for ``persist_s`` consecutive seconds. When the server's ``/metrics`` are
readable, one of them must be a server signal: during a ramp with long requests the
completed rate trails the offered rate by one request latency, and TTFT creeps up as
batches grow, while the server is still keeping up — the queue tells them apart. A
server without ``/metrics`` is judged on the two client signals. The reported
``offered_rps`` is the windowed offered rate at the *onset*: the second from which
enough signals have held together without a break; ``offered_rps_range`` is the lowest
and highest per-second offered rate of the window that mean was taken over: the knee
lies somewhere among those seconds' loads, so half its width is the estimate's
uncertainty (a ramp's slope times half the window; a slower ramp narrows it). After ``recover_s`` seconds with no signal, one ``info`` event says the server
recovered and the detector re-arms (a later knee is reported again).

The knee event also says *why* (``knee_explain.explain_knee`` over the last
``knee_explain.WINDOW_S`` seconds and the run's ``ServerLimits``): its data's
``explanation`` is the limit hit, the evidence and what to try next, and its message
starts with the limit's title and ends with that suggestion.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from rampwatch.core.figures.knee_explain import WINDOW_S, explain_knee
from rampwatch.core.figures.knee_explanation import KneeExplanation
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.core.timeline import Event

SIGNALS = ("throughput_lag", "ttft_rise", "queue_growth", "kv_pressure")


def _finite(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


class KneeDetector:
    def __init__(
        self,
        window_s: int = 15,
        persist_s: int = 5,
        min_signals: int = 2,
        lag_ratio: float = 0.85,
        min_offered_rps: float = 0.5,
        ttft_factor: float = 3.0,
        ttft_min_rise_s: float = 0.05,
        queue_slope: float = 0.3,
        min_waiting: float = 5.0,
        kv_full_pct: float = 95.0,
        recover_s: int = 15,
        limits: ServerLimits | None = None,
    ) -> None:
        self.window_s = window_s
        self.persist_s = persist_s
        self.min_signals = min_signals
        self.lag_ratio = lag_ratio
        self.min_offered_rps = min_offered_rps
        self.ttft_factor = ttft_factor
        self.ttft_min_rise_s = ttft_min_rise_s
        self.queue_slope = queue_slope
        self.min_waiting = min_waiting
        self.kv_full_pct = kv_full_pct
        self.recover_s = recover_s
        self._hist: deque[dict[str, float]] = deque(maxlen=window_s)
        # The longer past the explanation reads (the baseline before the trouble began).
        self._explain_hist: deque[dict[str, float]] = deque(maxlen=max(WINDOW_S, window_s))
        self.limits = limits or ServerLimits()
        self._offered_at: dict[float, float] = {}
        self._offered_span_at: dict[float, tuple[float, float]] = {}
        self._since: dict[str, float | None] = dict.fromkeys(SIGNALS)
        self._streak_start: float | None = None
        self._ttft_floor = math.inf
        self.in_knee = False
        self._quiet_since: float | None = None
        self.knees = 0

    def _mean(self, key: str) -> float | None:
        vals = [h[key] for h in self._hist if _finite(h.get(key))]
        return sum(vals) / len(vals) if vals else None

    def _offered(self) -> float | None:
        target = self._mean("target_rps")
        return target if target is not None and target > 0 else self._mean("offered_rps")

    def _offered_span(self) -> tuple[float, float] | None:
        """The lowest and highest per-second offered rate of the window ``_offered``
        averages (the same series it reads)."""
        target = self._offered_rates("target_rps")
        rates = target if target and sum(target) > 0 else self._offered_rates("offered_rps")
        return (min(rates), max(rates)) if rates else None

    def _offered_rates(self, key: str) -> list[float]:
        return [h[key] for h in self._hist if _finite(h.get(key))]

    def signals(self) -> dict[str, str]:
        """Signals active in the current window, with a human-readable reason each."""
        out: dict[str, str] = {}
        full = len(self._hist) >= min(self.window_s, 5)
        if not full:
            return out
        offered = self._offered()
        done = (self._mean("completed_rps") or 0.0) + (self._mean("error_rps") or 0.0)
        if offered is not None and offered >= self.min_offered_rps and done < self.lag_ratio * offered:
            out["throughput_lag"] = f"completed {done:.1f} req/s vs offered {offered:.1f} req/s"
        ttft = self._mean("ttft_p50")
        if ttft is not None and len(self._hist) >= self.window_s:
            self._ttft_floor = min(self._ttft_floor, ttft)
            floor = self._ttft_floor
            if ttft >= self.ttft_factor * floor and ttft - floor >= self.ttft_min_rise_s:
                out["ttft_rise"] = f"TTFT p50 {ttft * 1000:.0f} ms vs {floor * 1000:.0f} ms baseline"
        waiting = [(i, h["waiting"]) for i, h in enumerate(self._hist) if _finite(h.get("waiting"))]
        if len(waiting) >= 5:
            x = np.array([w[0] for w in waiting], dtype=float)
            y = np.array([w[1] for w in waiting], dtype=float)
            slope = float(np.polyfit(x, y, 1)[0])
            if y[-1] >= self.min_waiting and slope > self.queue_slope:
                out["queue_growth"] = f"waiting queue {y[-1]:.0f}, growing {slope:.1f} req/s"
        kv = [h["kv_usage_pct"] for h in self._hist if _finite(h.get("kv_usage_pct"))]
        preempt = sum(h["preemptions"] for h in self._hist if _finite(h.get("preemptions")))
        if kv and max(kv[-3:]) >= self.kv_full_pct and preempt > 0:
            out["kv_pressure"] = f"KV cache {max(kv[-3:]):.0f}% with {preempt:.0f} preemptions"
        return out

    def explain(self) -> KneeExplanation:
        """Why the server stopped keeping up, from the seconds seen so far."""
        names = {name for values in self._explain_hist for name in values}
        window = {name: [values.get(name, math.nan) for values in self._explain_hist] for name in names}
        return explain_knee(window, self.limits)

    def update(self, t: float, values: dict[str, float]) -> Event | None:
        """Feed one completed second; returns the knee (or recovery) event, if any."""
        self._hist.append(values)
        self._explain_hist.append(values)
        offered = self._offered()
        if offered is not None:
            self._offered_at[t] = offered
        span = self._offered_span()
        if span is not None:
            self._offered_span_at[t] = span
        for old in [k for k in self._offered_at if k < t - 4 * self.window_s - self.persist_s]:
            del self._offered_at[old]
        for old in [k for k in self._offered_span_at if k < t - 4 * self.window_s - self.persist_s]:
            del self._offered_span_at[old]
        active = self.signals()
        for name in SIGNALS:
            if name in active:
                if self._since[name] is None:
                    self._since[name] = t
            else:
                self._since[name] = None

        server_readable = any(_finite(h.get("waiting")) or _finite(h.get("kv_usage_pct")) for h in self._hist)
        server_agrees = not server_readable or bool({"queue_growth", "kv_pressure"} & active.keys())
        if len(active) >= self.min_signals and server_agrees:
            if self._streak_start is None:
                self._streak_start = t
        else:
            self._streak_start = None

        if not self.in_knee:
            if self._streak_start is not None and t - self._streak_start + 1 >= self.persist_s:
                onset = self._streak_start
                # the windowed rate at the onset second describes the load that began the trouble
                rate = self._offered_at.get(onset, offered)
                span = self._offered_span_at.get(onset)
                self.in_knee = True
                self.knees += 1
                self._quiet_since = None
                evidence = [f"{name}: {active[name]}" for name in SIGNALS if name in active]
                why = self.explain()
                # The limit first: the events panel's line is cut at its edge.
                if why.limit == "undetermined":
                    message = f"server stopped keeping up at ~{rate:.1f} req/s offered (limit undetermined)"
                else:
                    message = f"{why.title} at ~{rate:.1f} req/s offered"
                    if why.try_next:
                        message += f" → try {why.try_next}"
                return Event(
                    t=t,
                    kind="knee",
                    message=message,
                    data={
                        "offered_rps": rate,
                        "onset_t": onset,
                        "offered_rps_range": None if span is None else list(span),
                        "evidence": evidence,
                        "occurrence": self.knees,
                        "explanation": why.to_dict(),
                        "limits": self.limits.to_dict(),
                    },
                )
            return None
        if active:
            self._quiet_since = None
            return None
        if self._quiet_since is None:
            self._quiet_since = t
        if t - self._quiet_since + 1 >= self.recover_s:
            self.in_knee = False
            self._quiet_since = None
            return Event(
                t=t,
                kind="info",
                message="server keeping up again after the knee",
                data={"knee_recovered": True, "offered_rps": offered},
            )
        return None


def feed(builder: Any, detector: KneeDetector) -> list[Event]:
    """Pass the builder's newly completed seconds to the detector; the caller publishes
    the returned events through the run's sinks (so recordings keep them)."""
    out = []
    for t, values in builder.take_completed_seconds():
        event = detector.update(t, values)
        if event is not None:
            out.append(event)
    return out
