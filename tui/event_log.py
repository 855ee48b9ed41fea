"""The run's events, newest last: errors by class, knee, holds, marks, scrape failures."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from loadgen.timeline import Event, Snapshot
from tui.chart_data import errors_by_class, format_duration

KIND_STYLES = {
    "knee": "bold red",
    "mark": "bold yellow",
    "hold": "cyan",
    "resume": "cyan",
    "set_rate": "cyan",
    "error": "red",
    "scrape_error": "magenta",
    "stop": "bold",
    "start": "bold",
}
MAX_SHOWN = 300


def event_line(event: Event) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(format_duration(event.t), style="dim")
    line.append(" ")
    line.append(f"{event.kind:<13}", style=KIND_STYLES.get(event.kind, ""))
    line.append(event.message)
    return line


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
        lines = []
        if errors:
            summary = Text("errors: ", style="bold red")
            summary.append(", ".join(f"{cls} ×{n}" for cls, n in sorted(errors.items())))
            lines.append(summary)
        lines.extend(event_line(e) for e in sorted(snapshot.events[-MAX_SHOWN:], key=lambda e: e.t))
        self.query_one(".event-lines", Static).update(Text("\n").join(lines) if lines else "no events yet")
        self.scroll_end(animate=False)
