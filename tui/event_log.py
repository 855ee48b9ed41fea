"""The run's events, newest last: errors by class, knee, holds, marks, scrape failures.

One row per event in three columns (time, kind, message). A message longer than the
panel is wide wraps inside its own column, under the message, so the time and kind
columns stay readable down the left edge (a hanging indent).
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from rampwatch.core.timeline import Event, Snapshot
from rampwatch.tui.chart_data import errors_by_class, format_duration

KIND_STYLES = {
    "knee": "bold red",
    "mark": "bold yellow",
    "hold": "cyan",
    "resume": "cyan",
    "set_rate": "cyan",
    "error": "red",
    "scrape_error": "magenta",
    "stop": "bold",
    "cancel": "bold red",
    "start": "bold",
}
MAX_SHOWN = 300


def event_cells(event: Event) -> tuple[Text, Text, Text]:
    """(time, kind, message) of one event, styled."""
    return (
        Text(format_duration(event.t), style="dim"),
        Text(event.kind, style=KIND_STYLES.get(event.kind, "")),
        Text(event.message, overflow="fold"),
    )


def event_table(events: list[Event]) -> Table:
    """The events as a grid: time and kind never wrap (the kind column is as wide as the
    longest kind shown); the message column takes the rest and wraps its words within it.
    """
    table = Table.grid(padding=(0, 1, 0, 0), expand=True)
    table.add_column("time", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("message", ratio=1, overflow="fold")
    for event in events:
        table.add_row(*event_cells(event))
    return table


def error_summary(errors: dict[str, int]) -> Text:
    summary = Text("errors: ", style="bold red")
    summary.append(", ".join(f"{cls} ×{n}" for cls, n in sorted(errors.items())))
    return summary


class EventLog(VerticalScroll):
    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Events"
        self._shown: tuple[int, float] | None = None

    def compose(self) -> ComposeResult:
        yield Static("no events yet", classes="event-lines")

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        errors = errors_by_class(snapshot)
        key = (len(snapshot.events), sum(errors.values()))
        if key == self._shown:
            return
        self._shown = key
        parts: list = []
        if errors:
            parts.append(error_summary(errors))
        events = sorted(snapshot.events[-MAX_SHOWN:], key=lambda e: e.t)
        if events:
            parts.append(event_table(events))
        self.query_one(".event-lines", Static).update(Group(*parts) if parts else "no events yet")
        # Repaint the whole panel, not only the lines: its empty rows and border must not
        # keep whatever was last drawn over them.
        self.refresh()
        self.scroll_end(animate=False)
