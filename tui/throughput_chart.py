"""Throughput: offered vs sent vs completed requests/s and failed requests/s by class
(left axis), tokens/s (right)."""

from rampwatch.tui.timeseries_chart import SeriesSpec, TimeSeriesChart

# Failed requests/s by class (core.timeline.ERROR_GROUPS), in colours that read as errors;
# drawn only in seconds that have some, and in the legend only once there are any.
ERROR_SPECS = (
    SeriesSpec("errors_http_rps", "http err", "red+", hide_zero=True),
    SeriesSpec("errors_connection_rps", "conn err", "red", hide_zero=True),
    SeriesSpec("errors_timeout_rps", "timeouts", "yellow", hide_zero=True),
    SeriesSpec("errors_protocol_rps", "proto err", "magenta+", hide_zero=True),
)


class ThroughputChart(TimeSeriesChart):
    TITLE = "Rate"
    Y_LABEL = "req/s"
    Y_RIGHT_LABEL = "tok/s"
    SERIES = (
        SeriesSpec("offered_rps", "offered", "white"),
        SeriesSpec("sent_rps", "sent", "blue+"),
        SeriesSpec("completed_rps", "completed", "green+"),
        *ERROR_SPECS,
        SeriesSpec("client_output_tps", "client", "magenta", right_axis=True),
        SeriesSpec("server_prompt_tps", "srv prompt", "cyan", right_axis=True, server=True),
        SeriesSpec("server_generation_tps", "srv gen", "orange", right_axis=True, server=True),
    )
