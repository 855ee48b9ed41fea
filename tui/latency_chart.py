"""Client latency in milliseconds, in three views (`v` cycles them): TTFT p50/p99 (left
axis) with ITL p50/p99 (right axis); TTFT p50/p90/p99; ITL p50/p90/p99. The percentile
views show how the distribution spreads over time: p90 leaving p50 before p99 moves is
the queue starting to form.

Log axes by default (`l` toggles linear): across a ramp TTFT spans two or three decades
(tens of ms before the knee, seconds past it), and on a linear axis everything before
the knee, p50 included, is a flat line on the floor; on a log axis p99/p50 is a
distance that reads the same at any level.

In a mixture, `w` shows one class's latencies instead of every request's (its name in
the title; ``tui.class_panel``), then the next class, then every request again."""

from __future__ import annotations

from dataclasses import dataclass

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.class_panel import class_view
from rampwatch.tui.timeseries_chart import COLOURS, SeriesSpec, TimeSeriesChart


@dataclass(frozen=True)
class LatencyView:
    title: str
    y_label: str
    y_right_label: str
    legend_left: str
    legend_right: str
    series: tuple[SeriesSpec, ...]


def _percentiles(metric: str, label: str) -> LatencyView:
    return LatencyView(
        title=f"{label} percentiles",
        y_label=f"{label} ms",
        y_right_label="",
        legend_left="",
        legend_right="",
        series=(
            SeriesSpec(f"{metric}_p50", "p50", COLOURS["green"], scale=1000.0, merge="max"),
            SeriesSpec(f"{metric}_p90", "p90", COLOURS["yellow"], scale=1000.0, merge="max"),
            SeriesSpec(f"{metric}_p99", "p99", COLOURS["red"], scale=1000.0, merge="max"),
        ),
    )


VIEWS = (
    LatencyView(
        title="Latency",
        y_label="TTFT ms",
        y_right_label="ITL ms",
        legend_left="TTFT",
        legend_right="ITL",
        series=(
            SeriesSpec("ttft_p50", "p50", COLOURS["green"], scale=1000.0, merge="max"),
            SeriesSpec("ttft_p99", "p99", COLOURS["red"], scale=1000.0, merge="max"),
            SeriesSpec("itl_p50", "p50", COLOURS["blue"], scale=1000.0, right_axis=True, merge="max"),
            SeriesSpec("itl_p99", "p99", COLOURS["magenta"], scale=1000.0, right_axis=True, merge="max"),
        ),
    ),
    _percentiles("ttft", "TTFT"),
    _percentiles("itl", "ITL"),
)


class LatencyChart(TimeSeriesChart):
    TITLE = VIEWS[0].title
    Y_LABEL = VIEWS[0].y_label
    Y_RIGHT_LABEL = VIEWS[0].y_right_label
    LOG_DEFAULT = True
    LEGEND_LEFT = VIEWS[0].legend_left
    LEGEND_RIGHT = VIEWS[0].legend_right
    SERIES = VIEWS[0].series

    view_index = 0
    class_name: str | None = None  # a mixture's class shown instead of every request

    def next_view(self) -> None:
        """The next of ``VIEWS``; redrawn at the next snapshot."""
        self.view_index = (self.view_index + 1) % len(VIEWS)
        self._apply_view()

    def show_class(self, name: str | None) -> None:
        """One class's latencies (None: every request's); redrawn at the next snapshot."""
        self.class_name = name
        self._apply_view()

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        if self.class_name is not None:
            snapshot = class_view(snapshot, self.class_name)
            compare = None if compare is None else class_view(compare, self.class_name)
        super().show_snapshot(snapshot, compare)

    def _apply_view(self) -> None:
        view = VIEWS[self.view_index]
        self.TITLE = view.title if self.class_name is None else f"{view.title} · class {self.class_name}"
        self.Y_LABEL, self.Y_RIGHT_LABEL = view.y_label, view.y_right_label
        self.LEGEND_LEFT, self.LEGEND_RIGHT, self.SERIES = view.legend_left, view.legend_right, view.series
        self._drawn_key, self._legend_key = None, None
        self.plt.clear_figure()  # the other view's axes (a right axis, its ticks) must not linger
