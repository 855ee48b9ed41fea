"""Client latency in milliseconds, in three views (`v` cycles them): TTFT p50/p99 (left
axis) with ITL p50/p99 (right axis); TTFT p50/p90/p99; ITL p50/p90/p99. The percentile
views show how the distribution spreads over time: p90 leaving p50 before p99 moves is
the queue starting to form.

Log axes by default (`l` toggles linear): across a ramp TTFT spans two or three decades
(tens of ms before the knee, seconds past it), and on a linear axis everything before
the knee, p50 included, is a flat line on the floor; on a log axis p99/p50 is a
distance that reads the same at any level.

In a mixture, `w` shows one class's latencies instead of every request's (its name in
the title; ``tui.class_panel``), then the next class, then every request again.

A reasoning run (``tui.reasoning_view``) has one more view, first in the cycle: TTFT
p50/p99 beside the time to first answer p50/p99 on the same axis, the reasoning share of
output tokens in its legend."""

from __future__ import annotations

from dataclasses import dataclass

from textual.content import Content

from rampwatch.core.timeline import Snapshot
from rampwatch.tui import reasoning_view
from rampwatch.tui.class_panel import class_view
from rampwatch.tui.timeseries_chart import (
    COLOURS,
    COMPARE_COLOUR,
    MONO_MARKERS,
    SeriesSpec,
    TimeSeriesChart,
    hex_colour,
)


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
# A reasoning run's view: the first token against the first answer token, on one axis.
REASONING_VIEW = LatencyView(
    title="TTFT vs first answer",
    y_label="ms",
    y_right_label="",
    legend_left="",
    legend_right="",
    series=(
        SeriesSpec("ttft_p50", "p50", COLOURS["green"], scale=1000.0, merge="max"),
        SeriesSpec("ttft_p99", "p99", COLOURS["red"], scale=1000.0, merge="max"),
        SeriesSpec("ttfa_p50", "p50", COLOURS["blue"], scale=1000.0, merge="max"),
        SeriesSpec("ttfa_p99", "p99", COLOURS["magenta"], scale=1000.0, merge="max"),
    ),
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
    views: tuple[LatencyView, ...] = VIEWS  # a reasoning run's: REASONING_VIEW first
    _share_title = ""  # the reasoning share, in the reasoning view's title

    def next_view(self) -> None:
        """The next of the views; redrawn at the next snapshot."""
        self.view_index = (self.view_index + 1) % len(self.views)
        self._apply_view()

    def show_class(self, name: str | None) -> None:
        """One class's latencies (None: every request's); redrawn at the next snapshot."""
        self.class_name = name
        self._apply_view()

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        if reasoning_view.has_reasoning(snapshot) and self.views is VIEWS:
            self.views = (REASONING_VIEW, *VIEWS)  # shown first; the view on screen stays
            self.view_index = 0 if self.view_index == 0 else self.view_index + 1
            self._apply_view()
        if self.views[self.view_index] is REASONING_VIEW:
            share = reasoning_view.share_title(snapshot)
            if share != self._share_title:
                self._share_title = share
                self._apply_view()
        if self.class_name is None:  # a class's figures have no TTFA series of their own
            snapshot = reasoning_view.with_reasoning(snapshot)
            compare = None if compare is None else reasoning_view.with_reasoning(compare)
        if self.class_name is not None:
            snapshot = class_view(snapshot, self.class_name)
            compare = None if compare is None else class_view(compare, self.class_name)
        super().show_snapshot(snapshot, compare)

    def legend_parts(self, with_compare: bool, absent: frozenset[str] = frozenset()) -> tuple[Content, Content]:
        """The reasoning view's legend in two groups, TTFT then TTFA and the reasoning share
        (both on the left axis): the second goes on the bottom border when a narrow chart
        has no room for both in its title."""
        if self.views[self.view_index] is not REASONING_VIEW:
            return super().legend_parts(with_compare, absent)
        title = self.TITLE + (" (log)" if self.log_scale else " (linear)")
        groups: dict[bool, list[Content]] = {False: [Content.styled(title, "bold"), Content(" TTFT:")]}
        groups[True] = [Content(" │ TTFA:")]
        for index, spec in enumerate(self.SERIES):
            if self.monochrome:
                sample = Content(f" {MONO_MARKERS[index % len(MONO_MARKERS)]}")
            else:
                sample = Content.styled(" ━", hex_colour(spec.colour))
            groups[spec.name.startswith("ttfa")].extend([sample, Content(f" {spec.label}")])
        if with_compare:
            groups[True].append(Content.styled(f"{' ·' if self.monochrome else ' ━'} (B)", hex_colour(COMPARE_COLOUR)))
        groups[True].append(Content(self._share_title))
        return Content("").join(groups[False]), Content("").join(groups[True])

    def _apply_view(self) -> None:
        view = self.views[self.view_index]
        self.TITLE = view.title if self.class_name is None else f"{view.title} · class {self.class_name}"
        self.Y_LABEL, self.Y_RIGHT_LABEL = view.y_label, view.y_right_label
        self.LEGEND_LEFT, self.LEGEND_RIGHT, self.SERIES = view.legend_left, view.legend_right, view.series
        self._drawn_key, self._legend_key = None, None
        self.plt.clear_figure()  # the other view's axes (a right axis, its ticks) must not linger
