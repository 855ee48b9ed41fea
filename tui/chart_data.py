"""Pure helpers that turn a Snapshot into what the charts and panels draw.

Kept free of Textual so they can be tested as plain functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from rampwatch.core.bins import complete_bins, latest_complete, recent_max, recent_mean
from rampwatch.core.figures.client_lag import LIVE_LAG_BOUND_MS
from rampwatch.core.timeline import Event, Snapshot
from rampwatch.loadgen.run.drain import drain_policy_of
from rampwatch.loadgen.workload.schedule_spec import TRACE_KIND


@dataclass(frozen=True, slots=True)
class Marker:
    """A vertical line drawn on every chart."""

    t: float
    kind: str  # "knee", "hold", "resume", "mark"
    label: str  # short text drawn at the top of the line


def is_present(value: float | None) -> TypeGuard[float]:
    """A value to draw: neither None nor NaN (NaN and None are the gaps in a series)."""
    return not (value is None or (isinstance(value, float) and math.isnan(value)))


def segments(times: Sequence[float], values: Sequence[float | None]) -> list[tuple[list[float], list[float]]]:
    """Split a series at missing values so a gap is drawn as a gap, never as a line to zero."""
    out: list[tuple[list[float], list[float]]] = []
    xs: list[float] = []
    ys: list[float] = []
    for t, v in zip(times, values):
        if not is_present(v):
            if xs:
                out.append((xs, ys))
                xs, ys = [], []
            continue
        xs.append(float(t))
        ys.append(float(v))
    if xs:
        out.append((xs, ys))
    return out


def last_value(values: Sequence[float | None]) -> float | None:
    """The most recent non-missing value of a series (None when it has none)."""
    for v in reversed(values):
        if is_present(v):
            return float(v)
    return None


def current_value(snapshot: Snapshot, name: str, look_back: int | None = None) -> float | None:
    """The series' value in the latest *complete* one-second bin, falling back to earlier
    bins past gaps (at most ``look_back`` bins back; None: as far as it takes)."""
    values = snapshot.series.get(name, [])
    return latest_complete(values, min(len(values), complete_bins(snapshot.times, snapshot.t)), look_back)


# The stats panel's "now" rates are means over this many complete seconds: one-second
# bins of a Poisson load flicker (at 5 rps a second holds 5 ± 2.2 requests).
NOW_WINDOW_S = 5


def recent_rate(snapshot: Snapshot, name: str, window_s: int = NOW_WINDOW_S) -> float | None:
    """The series' mean over its last ``window_s`` complete one-second bins (fewer at the
    start of a run), past missing ones; None when there is none."""
    values = snapshot.series.get(name, [])
    return recent_mean(values, min(len(values), complete_bins(snapshot.times, snapshot.t)), window_s)


def recent_client_lag_ms(snapshot: Snapshot, window_s: int = NOW_WINDOW_S) -> float | None:
    """The client's longest loop lag over its last ``window_s`` complete seconds when it
    passes ``LIVE_LAG_BOUND_MS`` (the screen names it then), else None."""
    values = snapshot.series.get("client_lag_ms", [])
    worst = recent_max(values, min(len(values), complete_bins(snapshot.times, snapshot.t)), window_s)
    return worst if worst is not None and worst > LIVE_LAG_BOUND_MS else None


TICK_STEPS_S = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)


def time_ticks(right: float, max_ticks: int) -> tuple[list[float], list[str]]:
    """Round time ticks for an axis 0 … right, labelled m:ss (h:mm:ss past an hour) at
    every length, live and in replay alike, so a tick never reads as a bare number."""
    max_ticks = max(2, max_ticks)
    step = next((s for s in TICK_STEPS_S if right / s <= max_ticks - 1), TICK_STEPS_S[-1])
    ticks = [float(i * step) for i in range(int(right // step) + 1)]
    labels = [clock_label(t) for t in ticks]
    return ticks, labels


def clock_label(seconds: float) -> str:
    """0:05, 1:30, 12:00, 1:00:00: ``format_duration`` without its leading zero."""
    label = format_duration(seconds)
    return label[1:] if label.startswith("0") and len(label) == 5 else label


def x_range(snapshot: Snapshot, compare: Snapshot | None = None) -> tuple[float, float]:
    """The one time axis every chart shares: 0 … max(elapsed, planned duration)."""
    right = max(snapshot.t, snapshot.planned_duration_s or 0.0)
    if snapshot.times:
        right = max(right, snapshot.times[-1] + 1.0)
    if compare is not None:
        right = max(right, compare.t, compare.planned_duration_s or 0.0)
    return 0.0, max(right, 10.0)


def nice_upper(value: float) -> float:
    """A round axis top at or above ``value`` (1, 2, 2.5, 5 × 10^n), so axes do not jitter."""
    if value <= 0 or math.isnan(value):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        top = step * 10**exponent
        if top >= value * (1 - 1e-9):
            return top
    return 10.0 ** (exponent + 1)


def y_upper(series: Iterable[Sequence[float | None]], floor: float = 1.0) -> float:
    peak = 0.0
    for values in series:
        for v in values:
            if is_present(v):
                peak = max(peak, float(v))
    return nice_upper(max(peak * 1.05, floor))


@dataclass(frozen=True, slots=True)
class LogAxis:
    """A log axis over whole decades: ``10**lo_exp … 10**hi_exp`` with a tick per decade
    (and at 2 and 5 × when it spans at most two decades, so it keeps some ticks)."""

    lo_exp: int
    hi_exp: int
    ticks: list[float]
    labels: list[str]


def compact_number(value: float) -> str:
    """1, 20, 500, 1k, 20k, 1M: axis labels that stay narrow."""
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def log_axis(series: Iterable[Sequence[float | None]]) -> LogAxis:
    """The decades the positive values span (values ≤ 0 cannot be drawn on a log axis and
    are left out, as gaps); 1 … 10 when there is no positive value."""
    positive = [float(v) for values in series for v in values if is_present(v) and float(v) > 0]
    if not positive:
        lo, hi = 0, 1
    else:
        lo = math.floor(math.log10(min(positive)))
        hi = max(lo + 1, math.ceil(math.log10(max(positive)) - 1e-9))
    mantissas = (1.0, 2.0, 5.0) if hi - lo <= 2 else (1.0,)
    ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in mantissas if m * 10.0**e <= 10.0**hi * (1 + 1e-9)]
    return LogAxis(lo, hi, ticks, [compact_number(t) for t in ticks])


def linear_ticks(top: float) -> tuple[list[float], list[str]]:
    """Ticks 0 … ``top`` (a ``nice_upper`` value) at a round step, 4 or 5 intervals."""
    intervals = 4 if f"{top:e}".startswith("2.0") else 5
    ticks = [top * i / intervals for i in range(intervals + 1)]
    return ticks, [compact_number(round(t, 9)) for t in ticks]


def log10_or_missing(values: Sequence[float | None]) -> list[float]:
    """A series as drawn on a log axis: log10 of each value; values ≤ 0 become gaps (their
    log does not exist). The charts draw logs on a linear plot rather than use plotext's
    log scale, whose build re-applies the log to its data each time it is drawn."""
    return [math.log10(float(v)) if is_present(v) and float(v) > 0 else math.nan for v in values]


def markers(events: Iterable[Event]) -> list[Marker]:
    """Knee, hold/resume and user marks as vertical markers, numbered marks as M1, M2, …;
    a server restart as the configuration it starts, C2, C3, … (C1 is the run's first)."""
    out: list[Marker] = []
    mark_no = 0
    config_no = 1
    for event in events:
        if event.kind == "knee":
            out.append(Marker(event.t, "knee", "K"))
        elif event.kind == "hold":
            out.append(Marker(event.t, "hold", "H"))
        elif event.kind == "resume":
            out.append(Marker(event.t, "resume", "R"))
        elif event.kind == "mark":
            mark_no += 1
            out.append(Marker(event.t, "mark", f"M{mark_no}"))
        elif event.kind == "config":
            config_no += 1
            out.append(Marker(event.t, "config", f"C{config_no}"))
    return out


@dataclass(frozen=True, slots=True)
class MarkerLabel:
    """The text drawn at the top of one or more markers' lines, from the first one's."""

    t: float
    kind: str  # the first marker's (its colour)
    text: str


def marker_labels(marks: Sequence[Marker], left: float, right: float, cells: int) -> list[MarkerLabel]:
    """The markers' labels placed on a ``cells``-wide time axis from ``left`` to ``right``
    so that none overprints another: a label that would start within the previous one
    (or the cell after it) joins it, "R,M1", at the earlier line's place."""
    span = max(right - left, 1e-9)
    out: list[MarkerLabel] = []
    end = -1.0  # the first cell free after the last label placed
    for mark in sorted(marks, key=lambda m: m.t):
        cell = (mark.t - left) / span * max(cells, 1)
        if out and cell < end + 1:
            last = out[-1]
            out[-1] = MarkerLabel(last.t, last.kind, f"{last.text},{mark.label}")
            end += 1 + len(mark.label)
        else:
            out.append(MarkerLabel(mark.t, mark.kind, mark.label))
            end = cell + len(mark.label)
    return out


def format_duration(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "--:--"
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def format_rate(rps: float | None) -> str:
    if not is_present(rps):
        return "–"
    if rps >= 100:
        return f"{rps:.0f}"
    if rps >= 10:
        return f"{rps:.1f}"
    return f"{rps:.2f}"


def format_ms(seconds: float | None) -> str:
    """Latencies are stored in seconds and shown in milliseconds."""
    if not is_present(seconds):
        return "–"
    ms = seconds * 1000.0
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms"


def format_number(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}"
    if value is None:
        return "–"
    return str(value)


# Schedule kinds that ramp from a start rate to an end rate over a duration.
RAMP_KINDS = ("linear", "exponential")


def schedule_text(schedule: dict[str, Any]) -> str:
    """A scenario's schedule in one line, e.g. ``linear 1 → 20 req/s over 120 s, poisson arrivals``."""

    def g(value: Any) -> str:
        return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)

    kind = g(schedule.get("kind", "?"))
    if kind == TRACE_KIND:  # e.g. "trace mooncake-sample.jsonl (mooncake) at speed ×1 → ×4"
        speed = schedule.get("speed", 1)
        pace = f"×{g(speed['start'])} → ×{g(speed['end'])}" if isinstance(speed, dict) else f"×{g(speed)}"
        name = str(schedule.get("path", "?")).replace("\\", "/").rsplit("/", 1)[-1]
        return f"trace {name} ({g(schedule.get('format', '?'))}) at speed {pace}"
    arrival = f", {g(schedule['arrival'])} arrivals" if schedule.get("arrival") else ""
    if "start_rps" in schedule and "end_rps" in schedule:
        over = f" over {g(schedule['duration_s'])} s" if "duration_s" in schedule else ""
        return f"{kind} {g(schedule['start_rps'])} → {g(schedule['end_rps'])} req/s{over}{arrival}"
    if "rate" in schedule:
        return f"{kind} {g(schedule['rate'])} req/s{arrival}"
    if "users" in schedule or "start_users" in schedule:  # a closed loop
        over = f" over {g(schedule['duration_s'])} s" if "duration_s" in schedule else ""
        if "users" in schedule:
            return f"{g(schedule['users'])} users{over}"
        return f"users {g(schedule['start_users'])} → {g(schedule.get('end_users', '?'))}{over}"
    return f"{kind} schedule{arrival}"


def format_count(value: float | None) -> str:
    """A number of requests (running, waiting, queued): whole, whatever its float type."""
    if not is_present(value):
        return "–"
    return f"{round(float(value)):,}"


def rate_step(current_rps: float, configured: float | None = None) -> float:
    """How much `+`/`-` change the rate: the configured step, else ~10 % of the rate rounded
    down to 1, 2 or 5 × 10^n, never below 0.5 rps."""
    if configured and configured > 0:
        return float(configured)
    raw = current_rps * 0.1
    if raw <= 0.5:
        return 0.5
    exponent = math.floor(math.log10(raw))
    for mantissa in (5.0, 2.0, 1.0):
        step = mantissa * 10**exponent
        if step <= raw * 1.0000001:
            return max(0.5, step)
    return 0.5


def metrics_url(snapshot: Snapshot) -> str:
    header = snapshot.header
    if header is None:
        return "the target"
    if header.metrics_urls:
        return ", ".join(header.metrics_urls)
    return header.target.rstrip("/") + "/metrics" if header.target else "the target"


def errors_by_class(snapshot: Snapshot) -> dict[str, int]:
    """Error counts per class: the summary's figure when it has one, else counted from events."""
    from_summary = snapshot.summary.get("errors_by_class") if snapshot.summary else None
    if isinstance(from_summary, dict) and from_summary:
        return {str(k): int(v) for k, v in from_summary.items()}
    counts: dict[str, int] = {}
    for event in snapshot.events:
        if event.kind == "error":
            cls = str(event.data.get("error_class") or event.data.get("class") or "error")
            counts[cls] = counts.get(cls, 0) + int(event.data.get("count", 1))
    return counts


def downsample(
    times: Sequence[float], values: Sequence[float | None], max_points: int, how: str = "mean"
) -> tuple[list[float], list[float]]:
    """At most ``max_points`` points: consecutive bins merged into equal groups, each drawn
    at its first bin's time with the mean (or, for ``how="max"``, the peak, so a latency
    spike stays visible) of its values. A group with no value stays missing, so gaps
    survive. A terminal cell shows two braille columns: more points than that only cost
    drawing time."""
    n = min(len(times), len(values))
    if max_points <= 0 or n <= max_points:
        return [float(t) for t in times[:n]], [float(v) if is_present(v) else float("nan") for v in values[:n]]
    size = math.ceil(n / max_points)
    out_t: list[float] = []
    out_v: list[float] = []
    for start in range(0, n, size):
        group = [float(v) for v in values[start : start + size] if is_present(v)]
        out_t.append(float(times[start]))
        if not group:
            out_v.append(float("nan"))
        else:
            out_v.append(max(group) if how == "max" else sum(group) / len(group))
    return out_t, out_v


def chart_key(snapshot: Snapshot, compare: Snapshot | None, width: int, height: int) -> tuple:
    """What a chart's picture depends on, coarsely: a new one-second bin, a new event,
    the /metrics status, the compared run, the state, the chart's size. Between two
    changes of the key the picture would only move inside the bin still filling, so the
    chart is redrawn at most about once a second instead of at every refresh."""
    return (
        len(snapshot.times),
        len(snapshot.events),
        snapshot.server_metrics_available,
        snapshot.state,
        None if compare is None else (compare.t, len(compare.times), len(compare.events)),
        width,
        height,
    )


# ----- time left, ETA and the drain (the header) -----

SCHEDULE_STATES = ("starting", "ramping", "holding", "restarting")
DRAIN_STATES = ("draining", "stopping")


@dataclass(frozen=True, slots=True)
class TimeLeft:
    """What is left of a run at a snapshot: the schedule (0 once it is over) and an
    estimate of the drain after it (None: no estimate yet)."""

    schedule_s: float | None
    drain_s: float | None

    @property
    def total_s(self) -> float | None:
        if self.schedule_s is None:
            return None
        return self.schedule_s + (self.drain_s or 0.0)


def stop_request(snapshot: Snapshot) -> Event | None:
    """The event of a stop the user (or Ctrl-C) asked for, if any (not the end of the run)."""
    return next((e for e in snapshot.events if e.kind == "stop" and "interrupted" not in e.data), None)


def grace_period_s(snapshot: Snapshot, stop: Event | None) -> float | None:
    """A stop's grace period: in its event, else (older recordings) the run's options."""
    if stop is not None and "grace_s" in stop.data:
        return float(stop.data["grace_s"])
    options = snapshot.header.options if snapshot.header else {}
    grace = options.get("stop_grace")
    return float(grace) if isinstance(grace, (int, float)) else None


# The drain's pace is read over this many complete seconds: steadier than the stats
# panel's "now", still recent enough to follow a server slowing down.
DRAIN_RATE_WINDOW_S = 10
# Fewer requests than this ended over that window: their pace is noise (20 left at 4 in
# 10 s reads 50 s, at 2 reads 100 s), and the estimate goes by latency alone.
DRAIN_PACE_MIN_ENDED = 10


def drain_estimate_s(snapshot: Snapshot, drained_s: float) -> float | None:
    """How long the requests still out should take to end, ``drained_s`` into the drain
    (None: cannot know — no request has ended yet, so there is no rate or latency to go by).

    The larger of two figures: the run-so-far p99 E2E latency less the time drained (a
    request sent just before the schedule's end needs about one; 0 once requests outlive
    it: a stalled drain is overdue, not "a few more seconds"), and the requests in flight
    or waiting for a slot divided by the rate requests ended at over the last
    ``DRAIN_RATE_WINDOW_S`` complete seconds (an overloaded server ends them at its own
    pace: 886 in flight at 5 a second is three minutes, whatever one request's latency
    was), once at least ``DRAIN_PACE_MIN_ENDED`` ended in that window."""
    summary = snapshot.summary or {}
    e2e_ms = summary.get("p99_e2el_ms")
    # Before any request has completed there is no latency to go by (the summary says 0).
    if not (isinstance(e2e_ms, (int, float)) and math.isfinite(e2e_ms) and summary.get("completed", 1) > 0):
        return None
    by_latency = max(0.0, e2e_ms / 1000.0 - drained_s)
    queued = current_value(snapshot, "client_queued")
    left = snapshot.in_flight + (int(queued) if queued is not None else 0)
    ended = sum(recent_rate(snapshot, name, DRAIN_RATE_WINDOW_S) or 0.0 for name in ("completed_rps", "error_rps"))
    if left <= 0 or ended * DRAIN_RATE_WINDOW_S < DRAIN_PACE_MIN_ENDED:
        return by_latency
    return max(by_latency, left / ended)


def time_left(snapshot: Snapshot) -> TimeLeft | None:
    """The schedule's time left (its current plan less the time now) and the drain's
    (``drain_estimate_s``, from the schedule's end or the stop that cut it short), bounded
    by what the run will wait: the drain policy's cap (``cancel``: 0) and, after a stop,
    the rest of its grace period, after which the run cancels what is left. None once the
    run is done."""
    state = snapshot.state
    if state not in SCHEDULE_STATES and state not in DRAIN_STATES:
        return None
    planned = snapshot.planned_duration_s
    policy = drain_policy_of(snapshot.header.options if snapshot.header else None)
    if state in SCHEDULE_STATES:
        schedule = None if planned is None else max(0.0, planned - snapshot.t)
        return TimeLeft(schedule, _at_most(drain_estimate_s(snapshot, 0.0), policy.limit_s))
    # The drain began when the schedule ended, or at the stop that cut it short.
    stop = stop_request(snapshot) if state == "stopping" else None
    began = stop.t if stop is not None and (planned is None or stop.t < planned) else planned
    drained = max(0.0, snapshot.t - began) if began is not None else 0.0
    drain = drain_estimate_s(snapshot, drained)
    cut_short = began is not None and stop is not None and began == stop.t  # a stop ended the schedule
    if policy.limit_s is not None and began is not None and not cut_short:  # its grace alone bounds it
        drain = _at_most(drain, max(0.0, began + policy.limit_s - snapshot.t))
    grace = grace_period_s(snapshot, stop)
    if stop is not None and grace is not None:
        drain = _at_most(drain, max(0.0, stop.t + grace - snapshot.t))
    return TimeLeft(0.0, drain)


def _at_most(estimate: float | None, limit: float | None) -> float | None:
    """An estimate bounded by what the run will wait (an unknown one is the limit)."""
    if limit is None:
        return estimate
    return limit if estimate is None else min(estimate, limit)


def eta_unix(snapshot: Snapshot, left: TimeLeft | None) -> float | None:
    """The wall-clock time (Unix) the run should end, drain included (None while
    draining without an estimate: "now" would be a guess presented as a fact)."""
    if left is None or left.total_s is None or snapshot.header is None:
        return None
    if snapshot.state in DRAIN_STATES and left.drain_s is None:
        return None
    return snapshot.header.started_at_unix + snapshot.t + left.total_s


def oldest_in_flight_age_s(snapshot: Snapshot) -> float | None:
    sent_at = snapshot.oldest_in_flight_sent_at
    return None if sent_at is None or snapshot.in_flight <= 0 else max(0.0, snapshot.t - sent_at)
