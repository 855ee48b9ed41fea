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
    linear_ticks,
    log10_or_missing,
    log_axis,
    marker_labels,
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
# A compared run's marker's kind: drawn in the compared run's colour.
COMPARED = "compared"
# The chart's cells outside its plot (border, both axes' labels): at least, so that the
# plot's width is not overestimated and close labels are merged rather than overprinted.
PLOT_MARGIN_CELLS = 14
MARKER_COLOURS: dict[str, RGB] = {
    "knee": COLOURS["red"],
    "hold": COLOURS["cyan"],
    "resume": COLOURS["cyan"],
    "mark": COLOURS["orange"],
    "config": COLOURS["green"],
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
    Y_TOP: float | None = None  # fixed left axis top (percentages), else scaled to the data
    Y_RIGHT_TOP: float | None = None  # the same for the right axis
    SERVER_ONLY = False  # every series comes from /metrics
    LOG_DEFAULT: bool | None = None  # None: linear only; else the chart toggles log/linear, starting so
    LEGEND_LEFT = ""  # names the left axis's series in the legend (e.g. "TTFT")
    LEGEND_RIGHT = ""  # names the right axis's series in the legend (default: Y_RIGHT_LABEL)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = self.TITLE
        self._legend_key: tuple | None = None
        self._legend_subtitle = Content("")
        self._message: str | None = "waiting for data…"
        self._drawn_key: tuple | None = None
        self.monochrome = False
        self.draws = 0  # how many times the plot was rebuilt (refresh cost is measured by it)
        self.log_scale = bool(self.LOG_DEFAULT)
        self._skipped: tuple[Snapshot, Snapshot | None] | None = None  # what came while it had no size

    def toggle_log(self) -> None:
        """Log ↔ linear value axes (charts with a LOG_DEFAULT only); redrawn at the next snapshot."""
        if self.LOG_DEFAULT is None:
            return
        self.log_scale = not self.log_scale
        self._drawn_key, self._legend_key = None, None

    def on_resize(self) -> None:
        if self._skipped is not None and self.size.area:
            self.show_snapshot(*self._skipped)

    def on_mount(self) -> None:
        super().on_mount()
        self.monochrome = bool(getattr(self.app, "no_color", False))
        if self.monochrome:
            self.theme = "clear"

    def legend_parts(self, with_compare: bool, absent: frozenset[str] = frozenset()) -> tuple[Content, Content]:
        """The chart's title with its legend, as (left-axis part, right-axis part): a
        coloured sample (or, without colour, the character that draws the series) before
        each label; the right part starts with '│' and the right axis's name. ``absent``
        names ``hide_zero`` series with nothing to draw, left out of the legend."""
        title = self.TITLE
        if self.LOG_DEFAULT is not None:
            title += " (log)" if self.log_scale else " (linear)"
        left = [Content.styled(title, "bold")]
        if self.LEGEND_LEFT:
            left.append(Content(f" {self.LEGEND_LEFT}:"))
        right: list[Content] = []
        for index, spec in enumerate(self.SERIES):
            if spec.name in absent:
                continue
            if spec.right_axis and not right:
                name = self.LEGEND_RIGHT or self.Y_RIGHT_LABEL
                right.append(Content(f" │ {name}:" if name else " │"))
            if self.monochrome:
                sample = Content(f" {MONO_MARKERS[index % len(MONO_MARKERS)]}")
            else:
                sample = Content.styled(" ━", hex_colour(spec.colour))
            (right if spec.right_axis else left).extend([sample, Content(f" {spec.label}")])
        if with_compare:
            compare_sample = " ·" if self.monochrome else " ━"
            (right or left).append(Content.styled(f"{compare_sample} (B)", hex_colour(COMPARE_COLOUR)))
        return Content("").join(left), Content("").join(right)

    def legend(
        self, with_compare: bool, absent: frozenset[str] = frozenset(), width: int | None = None
    ) -> tuple[Content, Content]:
        """(border title, legend for the bottom border): the whole legend in the title
        when it fits ``width`` (the border's corners and title padding take 6 cells),
        else the right axis's part on the bottom border, so no label is cut off."""
        left, right = self.legend_parts(with_compare, absent)
        whole = left + right
        if width is None or whole.cell_length <= width - 6 or not right.cell_length:
            return whole, Content("")
        return left, right[3:] if right.plain.startswith(" │ ") else right

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
        if not self.size.area:
            # Hidden (another tab or layout) or not laid out yet: drawn when it gets a size
            # (on_resize), with its legend fitted to that width.
            self._skipped = (snapshot, compare)
            return
        self._skipped = None
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

    def _scaled_values(self, snapshot: Snapshot, spec: SeriesSpec) -> list[float]:
        values = snapshot.series.get(spec.name, [])
        if spec.hide_zero:
            values = [math.nan if v == 0 else v for v in values]
        if spec.scale == 1.0:
            return list(values)
        return [v * spec.scale for v in values]

    def _series_values(self, snapshot: Snapshot, spec: SeriesSpec) -> list[float]:
        """The values as plotted: log10 of them on a log axis."""
        values = self._scaled_values(snapshot, spec)
        return log10_or_missing(values) if self.log_scale else values

    def _points(self, snapshot: Snapshot, spec: SeriesSpec) -> tuple[list[float], list[float]]:
        return downsample(snapshot.times, self._series_values(snapshot, spec), self.max_points(), spec.merge)

    def draw(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        absent = frozenset(
            spec.name
            for spec in self.SERIES
            if spec.hide_zero and not any(v > 0 for v in snapshot.series.get(spec.name, []))
        )
        legend_key = (self.monochrome, compare is not None, absent, self.size.width)
        if legend_key != self._legend_key:
            self._legend_key = legend_key
            self.border_title, self._legend_subtitle = self.legend(compare is not None, absent, self.size.width or None)
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
            values = [self._scaled_values(run, spec) for run in runs for spec in specs]
            # textual-plotext's stubs type xside/yside as float and give ylabel no yside;
            # plotext itself takes "left"/"right" (and "lower"), hence the narrow ignores below.
            yside = "right" if side else "left"
            if self.log_scale:  # the series are drawn as log10: so are the limits and ticks
                axis = log_axis(values)
                plt.ylim(axis.lo_exp, axis.hi_exp, yside=yside)  # type: ignore[arg-type]
                plt.yticks([math.log10(t) for t in axis.ticks], axis.labels, yside=yside)  # type: ignore[arg-type]
                tops[side] = float(axis.hi_exp)
            else:
                fixed = self.Y_RIGHT_TOP if side else self.Y_TOP
                tops[side] = fixed if fixed is not None else y_upper(values)
                plt.ylim(0, tops[side], yside=yside)  # type: ignore[arg-type]
                if self.LOG_DEFAULT is not None:  # plotext keeps the log axis's ticks otherwise
                    plt.yticks(*linear_ticks(tops[side]), yside=yside)  # type: ignore[arg-type]
        if True in tops:
            plt.xlim(left, right, xside="lower")  # type: ignore[arg-type]
        plt.ylabel(self.Y_LABEL, yside="left")  # type: ignore[call-arg]
        if True in tops and self.Y_RIGHT_LABEL:
            plt.ylabel(self.Y_RIGHT_LABEL, yside="right")  # type: ignore[call-arg]

        missing: list[str] = []
        for index, spec in enumerate(self.SERIES):
            yside = "right" if spec.right_axis else "left"
            marker = MONO_MARKERS[index % len(MONO_MARKERS)] if self.monochrome else "braille"
            if compare is not None:
                compare_marker = "·" if self.monochrome else marker
                self._plot_series(*self._points(compare, spec), COMPARE_COLOUR, compare_marker, yside)
            if not self._plot_series(*self._points(snapshot, spec), spec.colour, marker, yside) and not spec.hide_zero:
                group = self.LEGEND_RIGHT if spec.right_axis else self.LEGEND_LEFT
                missing.append(f"{group} {spec.label}" if group else spec.label)
        server_missing = not snapshot.server_metrics_available and any(s.server for s in self.SERIES)
        if server_missing:
            status = f"server series: no usable /metrics from {metrics_url(snapshot)}"
        elif missing:
            status = "no data yet: " + ", ".join(missing)
        else:
            status = ""
        if self._legend_subtitle.cell_length:
            self.border_subtitle = self._legend_subtitle + (Content(f" · {status}") if status else Content(""))
        else:
            self.border_subtitle = status
        # the compared run's knee, holds and marks too, dimmed and labelled (B)
        compared = [] if compare is None else [Marker(m.t, COMPARED, f"{m.label}(B)") for m in markers(compare.events)]
        self._draw_markers(markers(snapshot.events) + compared, left, right, tops.get(False, tops.get(True, 1.0)))

    def _colour(self, colour: RGB) -> RGB | str:
        return "default" if self.monochrome else colour

    def _plot_series(self, times, values, colour, marker, yside) -> bool:
        """Plot the series' runs of data; False when it has none (then the chart's subtitle
        names it, so a missing series is visibly missing rather than silently absent)."""
        parts = segments(times, values)
        for xs, ys in parts:
            self.plt.plot(xs, ys, color=self._colour(colour), marker=marker, yside=yside)
        return bool(parts)

    def _draw_markers(self, marks: list[Marker], left: float, right: float, y_top: float) -> None:
        """A line per marker; their labels placed so that none overprints another."""
        yside = "left" if any(not s.right_axis for s in self.SERIES) else "right"
        for mark in marks:
            self.plt.vertical_line(mark.t, color=self._marker_colour(mark.kind))
        cells = max(1, (self.size.width or 80) - PLOT_MARGIN_CELLS)
        for label in marker_labels(marks, left, right, cells):
            colour = self._marker_colour(label.kind)
            self.plt.text(label.text, label.t, y_top, color=colour, yside=yside, alignment="left")

    def _marker_colour(self, kind: str) -> RGB | str:
        return self._colour(COMPARE_COLOUR if kind == COMPARED else MARKER_COLOURS.get(kind, COLOURS["white"]))
