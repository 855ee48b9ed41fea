"""Server queue depth: running and waiting requests (from /metrics)."""

from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class QueueChart(TimeSeriesChart):
    TITLE = "Queue"
    Y_LABEL = "requests"
    SERVER_ONLY = True
    SERIES = (
        SeriesSpec("running", "running", COLOURS["green"], server=True),
        SeriesSpec("waiting", "waiting", COLOURS["red"], server=True),
    )
