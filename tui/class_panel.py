"""A mixture's classes on the live and replay screens (``Snapshot.classes``).

``w`` switches the latency chart between every request and each class in turn
(``LatencyChart.show_class``: the class's series drawn in place of the run's, which share
their names). The Classes panel, shown only for a mixture, has one column per class:
requests sent so far, the "now" rates and latencies as the Stats panel takes them (its
``NOW_WINDOW_S`` mean; the newest complete second's percentiles), and the share of the
class's finished requests that met its SLO so far. The class the chart shows is marked. A run that sends to LoRA adapters without a
mixture has its adapters here instead (the panel titled Adapters), and ``w`` steps
through them.
"""

from __future__ import annotations

import dataclasses
import math

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from rampwatch.core.figures.adapters import scenario_adapters
from rampwatch.core.figures.classes import MIX_KEY, sent, slo_attainment_pct
from rampwatch.core.timeline import ClassFigures, Snapshot
from rampwatch.tui.chart_data import NOW_WINDOW_S, current_value, format_rate, is_present, recent_rate
from rampwatch.tui.stats_panel import LATENCY_LOOK_BACK

CLASS_NOTE = f"w: chart · rates over {NOW_WINDOW_S} s · ms"


def adapters_grouped(snapshot: Snapshot) -> bool:
    """Whether ``Snapshot.classes`` holds LoRA adapters (a run that sends to adapters
    without a mixture) rather than a mixture's classes."""
    scenario = snapshot.header.scenario if snapshot.header is not None else None
    workload = scenario.get("workload") if isinstance(scenario, dict) else None
    return bool(scenario_adapters(scenario)) and not (isinstance(workload, dict) and MIX_KEY in workload)


def class_of(snapshot: Snapshot, name: str) -> ClassFigures | None:
    return next((c for c in snapshot.classes if c.name == name), None)


def class_view(snapshot: Snapshot, name: str) -> Snapshot:
    """The snapshot with a class's series in place of the run's of the same names (every
    other series, the events and the times kept): what the charts draw for that class. A
    snapshot without that class (a compared run) keeps no latency at all."""
    figures = class_of(snapshot, name)
    if figures is None:
        nan = [math.nan] * len(snapshot.times)
        return dataclasses.replace(snapshot, series={**snapshot.series, **{k: nan for k in _LATENCIES}})
    return dataclasses.replace(snapshot, series={**snapshot.series, **figures.series}, summary=figures.summary)


_LATENCIES = ("ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99")


def next_class(names: list[str], current: str | None) -> str | None:
    """The class ``w`` shows next: every request (None), then each class in turn."""
    if not names:
        return None
    if current not in names:
        return names[0]
    index = names.index(current) + 1
    return names[index] if index < len(names) else None


def _ms(seconds: float | None) -> str:
    if not is_present(seconds):
        return "–"
    assert seconds is not None
    ms = seconds * 1000.0
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.1f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}" if value >= 99.5 or value < 10 else f"{value:.1f}"


ROW_LABELS = ("ended", "req/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "SLO met %")


def class_columns(snapshot: Snapshot) -> list[tuple[str, list[str]]]:
    """(class name, its cells in ``ROW_LABELS`` order) for each class."""
    out = []
    for figures in snapshot.classes:
        view = class_view(snapshot, figures.name)
        out.append(
            (
                figures.name,
                [
                    f"{sent(figures.summary):,}",
                    format_rate(recent_rate(view, "completed_rps")),
                    *(
                        _ms(current_value(view, name, LATENCY_LOOK_BACK[name]))
                        for name in ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99")
                    ),
                    _pct(slo_attainment_pct(figures.summary)),
                ],
            )
        )
    return out


class ClassPanel(Widget):
    """The classes side by side; hidden outside a mixture."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Classes"
        self.border_subtitle = CLASS_NOTE
        self.display = False
        self.shown_class: str | None = None  # the class the latency chart shows
        self._columns: list[tuple[str, list[str]]] = []

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        # A run without a mixture groups its live figures by LoRA adapter (core.figures.series).
        self.border_title = "Adapters" if adapters_grouped(snapshot) else "Classes"
        columns = class_columns(snapshot)
        self.display = bool(columns)
        if columns != self._columns:
            relayout = len(columns) != len(self._columns)
            self._columns = columns
            self.refresh(layout=relayout)

    def show_class(self, name: str | None) -> None:
        self.shown_class = name
        self.refresh()

    def get_content_height(self, container, viewport, width: int) -> int:
        return 1 + (len(self._columns) if self.one_row_per_class(width) else len(ROW_LABELS))

    @classmethod
    def one_row_per_class(cls, width: int) -> bool:
        """A row per class where every figure fits on it (the narrow layout's full width);
        a column per class in the side panel."""
        return width >= cls.ROWS_MIN_WIDTH

    # The widest figures' row: a name, then ROW_LABELS as headers, one space apart.
    ROWS_MIN_WIDTH = 12 + sum(len(label) + 1 for label in ROW_LABELS)

    def render(self) -> Table:
        if self.one_row_per_class(self.size.width):
            return self._rows_table()
        label_width = max(len(label) for label in ROW_LABELS)
        widths = column_widths(self._columns, max(0, self.size.width - label_width))
        table = Table.grid(padding=(0, 1))
        table.add_column("", no_wrap=True, width=label_width)
        for width in widths:
            table.add_column(justify="right", no_wrap=True, width=width)
        table.add_row(
            "",
            *(
                Text(shorten(name, width), style=self._name_style(name))
                for (name, _), width in zip(self._columns, widths, strict=True)
            ),
        )
        for i, label in enumerate(ROW_LABELS):
            table.add_row(Text(label, style="dim"), *(cells[i] for _, cells in self._columns))
        return table

    def _rows_table(self) -> Table:
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column("class", ratio=1, no_wrap=True, overflow="ellipsis")
        for label in ROW_LABELS:
            table.add_column(label, justify="right", no_wrap=True)
        table.add_row(Text("class", style="dim"), *(Text(label, style="dim") for label in ROW_LABELS))
        for name, cells in self._columns:
            table.add_row(Text(name, style=self._name_style(name)), *cells)
        return table

    def _name_style(self, name: str) -> str:
        return "bold reverse" if name == self.shown_class else "bold"


def column_widths(columns: list[tuple[str, list[str]]], room: int) -> list[int]:
    """Each class column's width: its widest figure at least, its name when the room
    shared out allows (a column is separated from the previous one by one space)."""
    share = room // max(len(columns), 1) - 1
    return [max(max(len(c) for c in cells), min(len(name), share)) for name, cells in columns]


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"
