"""The run's health at a glance, from a Snapshot alone (so a replay shows it at its
position): the header's OK / DEGRADED / SERVER DOWN / METRICS STALE.

- **SERVER DOWN**: since the last second in which a request completed, requests failed
  with connection errors (refused, reset, broken off) and nothing else, and either at
  least ``DOWN_MIN_CONNECTION_ERRORS`` of them or ``/metrics`` failing too.
- **DEGRADED**: at least ``DEGRADED_ERROR_PCT`` % of the requests that ended in the last
  ``RECENT_S`` seconds failed (cancelled ones do not count either way).
- **METRICS STALE**: the last good ``/metrics`` scrape is older than
  ``core.timeline.metrics_stale_after_s`` (three scrape intervals, at least 3 s). A
  target that never gave usable metrics is not stale: its server panels say so already.
- **OK** otherwise.

Only whole seconds are judged (a Snapshot has no partial one); a request is counted in
the second it ended, when its record arrived, so a second is complete once it is over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rampwatch.core.timeline import ERROR_GROUPS, ERROR_SERIES, Snapshot, metrics_stale_after_s
from rampwatch.tui.chart_data import format_duration, is_missing

RECENT_S = 10
DEGRADED_ERROR_PCT = 1.0
DOWN_MIN_CONNECTION_ERRORS = 3

OK = "OK"
DEGRADED = "DEGRADED"
SERVER_DOWN = "SERVER DOWN"
METRICS_STALE = "METRICS STALE"


@dataclass(frozen=True, slots=True)
class Health:
    state: str  # OK, DEGRADED, SERVER DOWN or METRICS STALE
    detail: str = ""  # e.g. "4.2% errors in 10 s: http 12, timeout 1"; "" when OK
    metrics_stale_since: float | None = None  # run seconds of the last good scrape, when stale


def _values(snapshot: Snapshot, name: str) -> list[float]:
    return [0.0 if is_missing(v) else float(v) for v in snapshot.series.get(name, [])]


def metrics_stale_since(snapshot: Snapshot) -> float | None:
    """When the last good /metrics scrape was, if that is too long ago to show its figures as current."""
    last_good = snapshot.last_good_scrape_t
    if last_good is None or snapshot.t - last_good <= metrics_stale_after_s(snapshot.header):
        return None
    return last_good


def _scrapes_failing(snapshot: Snapshot) -> bool:
    last_good = snapshot.last_good_scrape_t if snapshot.last_good_scrape_t is not None else -math.inf
    return any(line.last_t > last_good for line in snapshot.scrape_errors)


def _down_since(snapshot: Snapshot) -> int | None:
    """The first second with a connection error in the trailing stretch without a
    completed request, when every failure in it was a connection error (and there are
    enough of them, or /metrics fails too); else None."""
    completed = _values(snapshot, "completed_rps")
    errors = {group: _values(snapshot, ERROR_SERIES[group]) for group in ERROR_GROUPS}
    n = len(completed)
    start = n
    while start > 0 and completed[start - 1] <= 0:
        start -= 1
    if start == n:
        return None
    connection = sum(errors["connection"][start:])
    others = sum(sum(errors[g][start:]) for g in ERROR_GROUPS if g != "connection")
    if connection <= 0 or others > 0:
        return None
    if connection < DOWN_MIN_CONNECTION_ERRORS and not _scrapes_failing(snapshot):
        return None
    return next(i for i in range(start, n) if errors["connection"][i] > 0)


def recent_errors(snapshot: Snapshot, window: int = RECENT_S) -> tuple[float, dict[str, float]]:
    """(requests that ended, failures per ``ERROR_GROUPS`` class) over the last ``window``
    seconds of the snapshot."""
    completed = sum(_values(snapshot, "completed_rps")[-window:])
    errors = {group: sum(_values(snapshot, ERROR_SERIES[group])[-window:]) for group in ERROR_GROUPS}
    return completed + sum(errors.values()), errors


def health(snapshot: Snapshot) -> Health:
    """The health state and its detail; see the module docstring for the rules."""
    stale_since = metrics_stale_since(snapshot)
    stale_note = f"metrics stale since {format_duration(stale_since)}" if stale_since is not None else ""
    down_since = _down_since(snapshot)
    if down_since is not None:
        connection = sum(_values(snapshot, ERROR_SERIES["connection"])[down_since:])
        detail = f"since {format_duration(down_since)}: {connection:.0f} connection errors, nothing completed"
        return Health(SERVER_DOWN, "; ".join(filter(None, [detail, stale_note])), stale_since)
    ended, errors = recent_errors(snapshot)
    failed = sum(errors.values())
    if ended > 0 and failed > 0 and 100.0 * failed / ended >= DEGRADED_ERROR_PCT:
        by_class = ", ".join(f"{group} {count:.0f}" for group, count in errors.items() if count > 0)
        detail = f"{100.0 * failed / ended:.1f}% errors in {RECENT_S} s ({by_class})"
        return Health(DEGRADED, "; ".join(filter(None, [detail, stale_note])), stale_since)
    if stale_since is not None:
        age = snapshot.t - stale_since
        return Health(METRICS_STALE, f"since {format_duration(stale_since)} ({age:.0f} s ago)", stale_since)
    return Health(OK)
