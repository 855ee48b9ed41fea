"""Queues: the server's running and waiting requests (from /metrics) beside the requests
waiting in the client for a ``--max-concurrency`` slot, so a client cap is not mistaken
for server saturation."""

from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class QueueChart(TimeSeriesChart):
    TITLE = "Queue"
    Y_LABEL = "requests"
    SERIES = (
        SeriesSpec("running", "running", COLOURS["green"], server=True),
        SeriesSpec("waiting", "waiting", COLOURS["red"], server=True),
        SeriesSpec("client_queued", "client queued", COLOURS["yellow"], hide_zero=True),
    )
