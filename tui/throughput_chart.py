"""Throughput: offered vs sent vs completed requests/s and failed requests/s by class
(left axis), tokens/s (right)."""

from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart

# Failed requests/s by class (core.timeline.ERROR_GROUPS), in colours that read as errors;
# drawn only in seconds that have some, and in the legend only once there are any.
ERROR_SPECS = (
    SeriesSpec("errors_http_rps", "http err", COLOURS["red"], hide_zero=True),
    SeriesSpec("errors_connection_rps", "conn err", COLOURS["dark_red"], hide_zero=True),
    SeriesSpec("errors_timeout_rps", "timeouts", COLOURS["yellow"], hide_zero=True),
    SeriesSpec("errors_protocol_rps", "proto err", COLOURS["pink"], hide_zero=True),
)


class ThroughputChart(TimeSeriesChart):
    TITLE = "Rate"
    Y_LABEL = "req/s"
    Y_RIGHT_LABEL = "tok/s"
    SERIES = (
        SeriesSpec("offered_rps", "offered", COLOURS["white"]),
        SeriesSpec("sent_rps", "sent", COLOURS["blue"]),
        SeriesSpec("completed_rps", "completed", COLOURS["green"]),
        *ERROR_SPECS,
        SeriesSpec("client_output_tps", "client", COLOURS["magenta"], right_axis=True),
        SeriesSpec("server_prompt_tps", "srv prompt", COLOURS["cyan"], right_axis=True, server=True),
        SeriesSpec("server_generation_tps", "srv gen", COLOURS["orange"], right_axis=True, server=True),
    )
