"""Throughput: offered vs sent vs completed requests/s (left axis) and tokens/s (right)."""

from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


class ThroughputChart(TimeSeriesChart):
    TITLE = "Rate"
    Y_LABEL = "req/s"
    Y_RIGHT_LABEL = "tok/s"
    SERIES = (
        SeriesSpec("offered_rps", "offered", COLOURS["white"]),
        SeriesSpec("sent_rps", "sent", COLOURS["blue"]),
        SeriesSpec("completed_rps", "completed", COLOURS["green"]),
        SeriesSpec("client_output_tps", "client", COLOURS["magenta"], right_axis=True),
        SeriesSpec("server_prompt_tps", "srv prompt", COLOURS["cyan"], right_axis=True, server=True),
        SeriesSpec("server_generation_tps", "srv gen", COLOURS["orange"], right_axis=True, server=True),
    )
