"""The chart every panel is built on: a Plotext plot of some Snapshot series on the run's
shared time axis, with the knee, holds and marks as vertical lines, and an optional
comparison run drawn dimmed."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.content import Content
from textual_plotext import PlotextPlot

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.chart_data import (
    Marker,
    chart_key,
    downsample,
    markers,
    metrics_url,
    segments,
    time_ticks,
    x_range,
    y_upper,
)

RGB = tuple[int, int, int]

# The one colour table of the charts. Each series, marker and the compared run is drawn
# with an exact RGB colour (plotext writes it as a 24-bit escape) and its legend swatch
# is styled from the same tuple (``hex_colour``). Named plotext colours ("blue+") are
# palette indices that each terminal shows as it likes, so a legend written for one
# palette lied on another.
COLOURS: dict[str, RGB] = {
    "white": (229, 229, 229),
    "blue": (92, 146, 255),
    "green": (0, 215, 95),
    "magenta": (215, 95, 215),
    "cyan": (0, 205, 205),
    "orange": (255, 150, 0),
    "red": (255, 70, 70),
    "dark_red": (190, 30, 45),
    "pink": (255, 135, 175),
    "yellow": (225, 200, 0),
    "gray": (127, 127, 127),
}
MARKER_COLOURS: dict[str, RGB] = {
    "knee": COLOURS["red"],
    "hold": COLOURS["cyan"],
    "resume": COLOURS["cyan"],
    "mark": COLOURS["orange"],
}
# Without colour, series are told apart by the character that draws them.
MONO_MARKERS = ("•", "x", "+", "o", "*", "#", "%", "@", "&", "=")
COMPARE_COLOUR: RGB = COLOURS["gray"]


def hex_colour(rgb: RGB) -> str:
    """``(92, 146, 255)`` → ``"#5c92ff"``: the legend's style for a plotted colour."""
    return "#{:02x}{:02x}{:02x}".format(*rgb)


@dataclass(frozen=True, slots=True)
class SeriesSpec:
    name: str  # key in Snapshot.series
    label: str
    colour: RGB
    scale: float = 1.0  # e.g. 1000 to show seconds as milliseconds
    right_axis: bool = False
    server: bool = False  # comes from /metrics
    merge: str = "mean"  # how bins merge when there are more than the chart has columns: "mean" or "max"
    # Drawn only where above zero, and never listed as missing: a series that is mostly
    # zero and matters when it is not (errors/s, requests queued in the client).
    hide_zero: bool = False


class TimeSeriesChart(PlotextPlot):
    """Subclasses set TITLE, SERIES and the axis labels; ``show_snapshot`` redraws."""

    TITLE = ""
    SERIES: tuple[SeriesSpec, ...] = ()
    Y_LABEL = ""
    Y_RIGHT_LABEL = ""
    Y_TOP: float | None = None  # fixed axis top (percentages), else scaled to the data
    SERVER_ONLY = False  # every series comes from /metrics

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = self.TITLE
        self._legend_key: tuple | None = None
        self._message: str | None = "waiting for data…"
        self._drawn_key: tuple | None = None
        self.monochrome = False
        self.draws = 0  # how many times the plot was rebuilt (refresh cost is measured by it)

    def on_mount(self) -> None:
        super().on_mount()
        self.monochrome = bool(getattr(self.app, "no_color", False))
        if self.monochrome:
            self.theme = "clear"

    def legend(self, with_compare: bool, absent: frozenset[str] = frozenset()) -> Content:
        """The chart's title with its legend: a coloured sample (or, without colour, the
        character that draws the series) before each label; right-axis series after '│'.
        ``absent`` names ``hide_zero`` series with nothing to draw, left out of the legend."""
        parts = [Content.styled(self.TITLE, "bold")]
        right_started = False
        for index, spec in enumerate(self.SERIES):
            if spec.name in absent:
                continue
            if spec.right_axis and not right_started:
                right_started = True
                parts.append(Content(f" │ {self.Y_RIGHT_LABEL}:" if self.Y_RIGHT_LABEL else " │"))
            if self.monochrome:
                sample = Content(f" {MONO_MARKERS[index % len(MONO_MARKERS)]}")
            else:
                sample = Content.styled(" ━", hex_colour(spec.colour))
            parts.extend([sample, Content(f" {spec.label}")])
        if with_compare:
            sample = " ·" if self.monochrome else " ━"
            parts.append(Content.styled(f"{sample} (B)", hex_colour(COMPARE_COLOUR)))
        return Content("").join(parts)

    def render(self) -> RenderResult:
        if self._message is not None:
            return Text(self._message, style="italic", justify="center")
        return super().render()

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        message = self.message_for(snapshot)
        if message is not None:
            if message != self._message:
                self._message, self._drawn_key = message, None
                self.refresh()
            return
        # Building a plot is the UI's main cost: rebuild only when the picture changes.
        key = chart_key(snapshot, compare, self.size.width, self.size.height)
        if key == self._drawn_key and self._message is None:
            return
        self._message, self._drawn_key = None, key
        self.draw(snapshot, compare)
        self.draws += 1
        self.refresh()

    def max_points(self) -> int:
        """Four points per cell of the plot area (the chart less its axes): a cell shows two
        braille columns, and merging pairs of bins would halve the detail for little gain;
        what matters is that a long run is not drawn second by second."""
        return max(40, 4 * ((self.size.width or 80) - 14))

    def message_for(self, snapshot: Snapshot) -> str | None:
        if self.SERVER_ONLY and not snapshot.server_metrics_available:
            return f"{self.TITLE}: no usable /metrics from {metrics_url(snapshot)}"
        if not snapshot.times:
            return "waiting for data…"
        return None

    def _series_values(self, snapshot: Snapshot, spec: SeriesSpec) -> list[float]:
        values = snapshot.series.get(spec.name, [])
        if spec.hide_zero:
            values = [math.nan if v == 0 else v for v in values]
        if spec.scale == 1.0:
            return list(values)
        return [v * spec.scale for v in values]

    def _points(self, snapshot: Snapshot, spec: SeriesSpec) -> tuple[list[float], list[float]]:
        return downsample(snapshot.times, self._series_values(snapshot, spec), self.max_points(), spec.merge)

    def draw(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        absent = frozenset(
            spec.name
            for spec in self.SERIES
            if spec.hide_zero and not any(v > 0 for v in snapshot.series.get(spec.name, []))
        )
        legend_key = (self.monochrome, compare is not None, absent)
        if legend_key != self._legend_key:
            self._legend_key = legend_key
            self.border_title = self.legend(compare is not None, absent)
        plt = self.plt
        plt.clear_data()
        plt.title("")
        left, right = x_range(snapshot, compare)
        plt.xlim(left, right)
        ticks, tick_labels = time_ticks(right, max(2, (self.size.width or 80) // 10))
        plt.xticks(ticks, tick_labels)
        specs_by_side = {
            False: [s for s in self.SERIES if not s.right_axis],
            True: [s for s in self.SERIES if s.right_axis],
        }
        tops: dict[bool, float] = {}
        for side, specs in specs_by_side.items():
            if not specs:
                continue
            runs = [snapshot] + ([compare] if compare is not None else [])
            values = [self._series_values(run, spec) for run in runs for spec in specs]
            tops[side] = self.Y_TOP if self.Y_TOP is not None else y_upper(values)
            yside = "right" if side else "left"
            plt.ylim(0, tops[side], yside=yside)
        if True in tops:
            plt.xlim(left, right, xside="lower")
        plt.ylabel(self.Y_LABEL, yside="left")
        if True in tops and self.Y_RIGHT_LABEL:
            plt.ylabel(self.Y_RIGHT_LABEL, yside="right")

        missing: list[str] = []
        for index, spec in enumerate(self.SERIES):
            yside = "right" if spec.right_axis else "left"
            marker = MONO_MARKERS[index % len(MONO_MARKERS)] if self.monochrome else "braille"
            if compare is not None:
                compare_marker = "·" if self.monochrome else marker
                self._plot_series(*self._points(compare, spec), COMPARE_COLOUR, compare_marker, yside)
            if not self._plot_series(*self._points(snapshot, spec), spec.colour, marker, yside) and not spec.hide_zero:
                missing.append(spec.label)
        server_missing = not snapshot.server_metrics_available and any(s.server for s in self.SERIES)
        if server_missing:
            self.border_subtitle = f"server series: no usable /metrics from {metrics_url(snapshot)}"
        elif missing:
            self.border_subtitle = "no data yet: " + ", ".join(missing)
        else:
            self.border_subtitle = ""
        self._draw_markers(markers(snapshot.events), tops.get(False, tops.get(True, 1.0)), False)
        if compare is not None:
            # the compared run's knee, holds and marks too, dimmed and labelled (B)
            self._draw_markers(markers(compare.events), tops.get(False, tops.get(True, 1.0)), True)

    def _colour(self, colour: RGB) -> RGB | str:
        return "default" if self.monochrome else colour

    def _plot_series(self, times, values, colour, marker, yside) -> bool:
        """Plot the series' runs of data; False when it has none (then the chart's subtitle
        names it, so a missing series is visibly missing rather than silently absent)."""
        parts = segments(times, values)
        for xs, ys in parts:
            self.plt.plot(xs, ys, color=self._colour(colour), marker=marker, yside=yside)
        return bool(parts)

    def _draw_markers(self, marks: list[Marker], y_top: float, dimmed: bool) -> None:
        yside = "left" if any(not s.right_axis for s in self.SERIES) else "right"
        for mark in marks:
            colour = self._colour(COMPARE_COLOUR if dimmed else MARKER_COLOURS.get(mark.kind, COLOURS["white"]))
            self.plt.vertical_line(mark.t, color=colour)
            label = f"{mark.label}(B)" if dimmed else mark.label
            self.plt.text(label, mark.t, y_top, color=colour, yside=yside, alignment="left")
