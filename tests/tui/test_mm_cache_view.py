"""The multimodal cache hit rate on the live screen: in the Prefix chart and the stats
panel only in a run whose server counted a multimodal cache query."""

from __future__ import annotations

from rampwatch.tui.prefix_chart import MM_CACHE_SERIES, PREFIX_SERIES, PrefixChart
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.test_health import snapshot


def with_mm(values: list[float] | None):
    snap = snapshot([5.0] * 10)
    if values is not None:
        snap.series["mm_cache_hit_pct"] = list(values)
    return snap


def test_the_stats_panel_row_only_with_the_series():
    assert "MM cache hit %" not in dict(StatsPanel().rows(with_mm(None))[0])
    assert dict(StatsPanel().rows(with_mm([80.0] * 10))[0])["MM cache hit %"] == "80.0"


def test_the_stats_panel_row_says_when_metrics_went_stale():
    snap = with_mm([80.0] * 10)
    snap.last_good_scrape_t = 0.5
    assert dict(StatsPanel().rows(snap)[0])["MM cache hit %"].startswith("stale ")


def test_the_prefix_chart_draws_the_series_only_when_the_run_has_it():
    chart = PrefixChart()
    chart.show_snapshot(with_mm(None))
    assert chart.SERIES == PREFIX_SERIES
    chart.show_snapshot(with_mm([80.0] * 10))
    assert chart.SERIES == (*PREFIX_SERIES, MM_CACHE_SERIES)
    assert "MM cache hit %" in chart.legend_parts(False)[0].plain
