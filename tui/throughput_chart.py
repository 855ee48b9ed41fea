"""Throughput: offered vs sent vs completed requests/s (left axis) and tokens/s (right)."""

from rampwatch.tui.timeseries_chart import SeriesSpec, TimeSeriesChart


class ThroughputChart(TimeSeriesChart):
    TITLE = "Rate"
    Y_LABEL = "req/s"
    Y_RIGHT_LABEL = "tok/s"
    SERIES = (
        SeriesSpec("offered_rps", "offered", "white"),
        SeriesSpec("sent_rps", "sent", "blue+"),
        SeriesSpec("completed_rps", "completed", "green+"),
        SeriesSpec("client_output_tps", "client", "magenta", right_axis=True),
        SeriesSpec("server_prompt_tps", "srv prompt", "cyan", right_axis=True, server=True),
        SeriesSpec("server_generation_tps", "srv gen", "orange", right_axis=True, server=True),
    )
