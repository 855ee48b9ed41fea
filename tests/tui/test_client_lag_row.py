"""The live screen names the client's own loop lag once it passes its bound, and only then."""

from __future__ import annotations

import math

import pytest

from rampwatch.app.session import progress_line
from rampwatch.tui.chart_data import recent_client_lag_ms
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.test_health import snapshot


def with_lag(lags: list[float]):
    snap = snapshot([5.0] * len(lags))
    snap.series["client_lag_ms"] = list(lags)
    return snap


@pytest.mark.parametrize(
    ("lags", "shown"),
    [
        ([0.4] * 20, None),  # healthy
        ([0.4] * 10 + [250.0] + [0.4] * 9, None),  # a stall 10 s ago has left the 5 s window
        ([0.4] * 16 + [250.0] + [0.4] * 3, "250 ms"),
        ([0.4] * 19 + [20.0], None),  # at the bound, not past it
        ([math.nan] * 20, None),  # an older recording: no self-check
    ],
)
def test_the_stats_panel_shows_the_lag_only_past_its_bound(lags, shown):
    snap = with_lag(lags)
    now_rows, _ = StatsPanel().rows(snap)
    rows = dict(now_rows)
    assert rows.get("client lag (late)") == shown
    assert (recent_client_lag_ms(snap) is None) is (shown is None)


def test_the_headless_progress_line_names_a_late_second():
    snap = with_lag([0.4] * 18 + [120.0, 0.4])  # the newest bin is still filling
    assert progress_line(snap, 1.0).endswith(" | client lag 120 ms")
    assert "client lag" not in progress_line(with_lag([0.4] * 20), 1.0)
