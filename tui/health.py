"""The run's health at a glance, from a Snapshot alone (so a replay shows it at its
position): the header's OK / DEGRADED / SERVER DOWN / METRICS STALE.

- **SERVER DOWN**: the server cannot be reached. Either ``/metrics`` has failed to
  connect since its last good scrape and requests failed with connection errors
  (refused, reset, broken off) in the last second in which any request ended; or,
  whatever ``/metrics`` says, at least ``DOWN_MIN_CONNECTION_ERRORS`` requests failed
  with connection errors, and none otherwise, since the last one that completed.
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
from rampwatch.loadgen.server.scrape import is_connection_failure
from rampwatch.tui.chart_data import format_duration, is_present

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
    detail: str = ""  # e.g. "4.2% errors in 10 s (http 12, timeout 1)"; "" when OK
    metrics_stale_since: float | None = None  # run seconds of the last good scrape, when stale


def _values(snapshot: Snapshot, name: str) -> list[float]:
    return [float(v) if is_present(v) else 0.0 for v in snapshot.series.get(name, [])]


def metrics_stale_since(snapshot: Snapshot) -> float | None:
    """When the last good /metrics scrape was, if that is too long ago to show its figures as current."""
    last_good = snapshot.last_good_scrape_t
    if last_good is None or snapshot.t - last_good <= metrics_stale_after_s(snapshot.header):
        return None
    return last_good


def _scrapes_unreachable(snapshot: Snapshot) -> bool:
    """Every /metrics scrape since the last good one failed to reach the server."""
    last_good = snapshot.last_good_scrape_t if snapshot.last_good_scrape_t is not None else -math.inf
    # A GPU telemetry source failing says nothing about the server.
    failing = [line for line in snapshot.scrape_errors if line.last_t > last_good and not line.gpu]
    return bool(failing) and all(is_connection_failure(line.message) for line in failing)


def _outcomes(snapshot: Snapshot) -> tuple[list[float], dict[str, list[float]]]:
    """Completed requests and failures per ``ERROR_GROUPS`` class, second by second (a
    missing value as 0): read once per health check, every rule works on them."""
    return _values(snapshot, "completed_rps"), {group: _values(snapshot, ERROR_SERIES[group]) for group in ERROR_GROUPS}


def _down_since(snapshot: Snapshot, completed: list[float], errors: dict[str, list[float]]) -> float | None:
    """When the server went away, if it has (see the module docstring); else None."""
    n = len(completed)
    # The last second in which any request ended, and whether connections failed in it.
    last_outcome = next(
        (
            i
            for i in range(n - 1, max(-1, n - 1 - RECENT_S), -1)
            if completed[i] + sum(e[i] for e in errors.values()) > 0
        ),
        None,
    )
    if last_outcome is not None and errors["connection"][last_outcome] > 0 and _scrapes_unreachable(snapshot):
        return snapshot.last_good_scrape_t if snapshot.last_good_scrape_t is not None else float(last_outcome)
    # Without /metrics to tell: only connection errors since the last completed request.
    start = n
    while start > 0 and completed[start - 1] <= 0:
        start -= 1
    connection = sum(errors["connection"][start:])
    others = sum(sum(errors[g][start:]) for g in ERROR_GROUPS if g != "connection")
    if start == n or connection < DOWN_MIN_CONNECTION_ERRORS or others > 0:
        return None
    return float(next(i for i in range(start, n) if errors["connection"][i] > 0))


def recent_errors(
    completed: list[float], errors: dict[str, list[float]], window: int = RECENT_S
) -> tuple[float, dict[str, float]]:
    """(requests that ended, failures per ``ERROR_GROUPS`` class) over the last ``window``
    seconds (``_outcomes``)."""
    recent = {group: sum(values[-window:]) for group, values in errors.items()}
    return sum(completed[-window:]) + sum(recent.values()), recent


def health(snapshot: Snapshot) -> Health:
    """The health state and its detail; see the module docstring for the rules."""
    stale_since = metrics_stale_since(snapshot)
    stale_note = f"metrics stale since {format_duration(stale_since)}" if stale_since is not None else ""
    completed, errors_by_second = _outcomes(snapshot)
    down_since = _down_since(snapshot, completed, errors_by_second)
    if down_since is not None:
        connection = sum(errors_by_second["connection"][int(down_since) :])
        detail = f"since {format_duration(down_since)}: {connection:.0f} connection errors"
        return Health(SERVER_DOWN, "; ".join(filter(None, [detail, stale_note])), stale_since)
    ended, errors = recent_errors(completed, errors_by_second)
    failed = sum(errors.values())
    if ended > 0 and failed > 0 and 100.0 * failed / ended >= DEGRADED_ERROR_PCT:
        by_class = ", ".join(f"{group} {count:.0f}" for group, count in errors.items() if count > 0)
        detail = f"{100.0 * failed / ended:.1f}% errors in {RECENT_S} s ({by_class})"
        return Health(DEGRADED, "; ".join(filter(None, [detail, stale_note])), stale_since)
    if stale_since is not None:
        age = snapshot.t - stale_since
        return Health(METRICS_STALE, f"since {format_duration(stale_since)} ({age:.0f} s ago)", stale_since)
    return Health(OK)
