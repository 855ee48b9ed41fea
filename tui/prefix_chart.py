"""Prefix-cache hit rate in percent (from /metrics)."""

from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class PrefixChart(TimeSeriesChart):
    TITLE = "Prefix cache"
    Y_LABEL = "hit %"
    Y_TOP = 100.0
    SERVER_ONLY = True
    SERIES = (SeriesSpec("prefix_hit_pct", "hit rate %", COLOURS["cyan"], server=True),)
