"""Client latency: TTFT p50/p99 (left axis) and ITL p50/p99 (right axis), in milliseconds."""

from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class LatencyChart(TimeSeriesChart):
    TITLE = "Latency"
    Y_LABEL = "TTFT ms"
    Y_RIGHT_LABEL = "ITL ms"
    SERIES = (
        SeriesSpec("ttft_p50", "TTFT p50", COLOURS["green"], scale=1000.0, merge="max"),
        SeriesSpec("ttft_p99", "TTFT p99", COLOURS["red"], scale=1000.0, merge="max"),
        SeriesSpec("itl_p50", "p50", COLOURS["blue"], scale=1000.0, right_axis=True, merge="max"),
        SeriesSpec("itl_p99", "p99", COLOURS["magenta"], scale=1000.0, right_axis=True, merge="max"),
    )
