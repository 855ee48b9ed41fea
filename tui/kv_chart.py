"""KV-cache usage in percent (from /metrics)."""

from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class KvChart(TimeSeriesChart):
    TITLE = "KV cache"
    Y_LABEL = "%"
    Y_TOP = 100.0
    SERVER_ONLY = True
    SERIES = (SeriesSpec("kv_usage_pct", "KV usage %", COLOURS["yellow"], server=True),)
