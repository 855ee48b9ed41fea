"""Client latency: TTFT p50/p99 (left axis) and ITL p50/p99 (right axis), in milliseconds.

Log axes by default (`l` toggles linear): across a ramp TTFT spans two or three decades
(tens of ms before the knee, seconds past it), and on a linear axis everything before
the knee, p50 included, is a flat line on the floor; on a log axis p99/p50 is a
distance that reads the same at any level."""

from rampwatch.tui.timeseries_chart import SeriesSpec, TimeSeriesChart


class LatencyChart(TimeSeriesChart):
    TITLE = "Latency"
    Y_LABEL = "TTFT ms"
    Y_RIGHT_LABEL = "ITL ms"
    LOG_DEFAULT = True
    LEGEND_LEFT = "TTFT"
    LEGEND_RIGHT = "ITL"
    SERIES = (
        SeriesSpec("ttft_p50", "p50", "green+", scale=1000.0, merge="max"),
        SeriesSpec("ttft_p99", "p99", "red+", scale=1000.0, merge="max"),
        SeriesSpec("itl_p50", "p50", "blue+", scale=1000.0, right_axis=True, merge="max"),
        SeriesSpec("itl_p99", "p99", "magenta+", scale=1000.0, right_axis=True, merge="max"),
    )
