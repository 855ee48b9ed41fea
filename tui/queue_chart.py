"""Server queue depth: running and waiting requests (from /metrics)."""

from rampwatch.tui.timeseries_chart import SeriesSpec, TimeSeriesChart


class QueueChart(TimeSeriesChart):
    TITLE = "Queue"
    Y_LABEL = "requests"
    SERVER_ONLY = True
    SERIES = (
        SeriesSpec("running", "running", "green+", server=True),
        SeriesSpec("waiting", "waiting", "red+", server=True),
    )
