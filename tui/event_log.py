"""The run's events, newest last: errors by class, knee, holds, marks, scrape failures.

A fixed-column log, one line per event: time, kind (at most ``KIND_WIDTH`` characters)
and the message, cut with an ellipsis at the panel's edge, so every line starts the same
way whatever the messages are. ``↑``/``↓`` (or the mouse) select a line and ``enter``
opens it whole (``EventDetail``).

``/metrics`` failures are one line per distinct failure (URL and reason) with how often
and since when it happened, counted from the scrapes themselves
(``Snapshot.scrape_errors``), not one line per failed scrape; the ``scrape_error``
events a run records (one per failure in recordings made before, one per change of
reason since) are then left out. A snapshot without scrape counts shows those events.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from rampwatch.core.figures.knee_explanation import KneeExplanation
from rampwatch.core.figures.summary import KNEE_REVIEW
from rampwatch.core.timeline import Event, ScrapeErrorLine, Snapshot
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
    "search": "bold blue",
}
# What the kind column says; every label fits KIND_WIDTH.
KIND_LABELS = {"scrape_error": "scrape", "set_rate": "rate"}
KIND_WIDTH = 6
MAX_SHOWN = 300


@dataclass(frozen=True, slots=True)
class EventRow:
    """One line of the log and what its detail view shows."""

    t: float
    kind: str  # an Event kind
    message: str  # one line
    detail: str  # the whole text, several lines


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind)[:KIND_WIDTH]


def one_line(text: str) -> str:
    return " ".join(text.split())


def limits_text(limits: dict) -> str:
    """``max_num_seqs 64 (serve command); num_gpu_blocks 4096, block_size 16 (/metrics
    cache_config_info)``: the limits a knee was explained with, grouped by source; a
    single engine and no tensor parallelism go unsaid."""
    sources = limits.get("sources") or {}
    groups: dict[str, list[str]] = {}
    for key, value in limits.items():
        if key == "sources" or (key in ("engines", "tensor_parallel_size") and value == 1):
            continue
        groups.setdefault(sources.get(key, ""), []).append(f"{key} {value}")
    parts = [", ".join(items) + (f" ({source})" if source else "") for source, items in groups.items()]
    return "; ".join(parts) or "none"


def event_row(event: Event) -> EventRow:
    detail = [f"{format_duration(event.t)}  {event.kind}", "", event.message]
    data = dict(event.data)
    explained = event.kind == "knee" or bool(data.get(KNEE_REVIEW))  # a knee, or the review that settled it
    why = KneeExplanation.from_dict(data.pop("explanation", None)) if explained else None
    if why is not None:  # the knee's why, a line per item rather than a dict
        detail += ["", *why.lines()]
        limits = data.pop("limits", None)
        if isinstance(limits, dict):
            detail.append("limits known: " + limits_text(limits))
        signals = data.pop("evidence", None)  # the detector's signals (the explanation has its own evidence)
        if isinstance(signals, list):
            detail += ["signals that marked it:", *(f"  {signal}" for signal in signals)]
    if data:
        detail += ["", *(f"{key}: {value}" for key, value in data.items())]
    return EventRow(event.t, event.kind, one_line(event.message), "\n".join(detail))


def scrape_error_row(line: ScrapeErrorLine) -> EventRow:
    """A distinct /metrics failure, placed at its last occurrence."""
    repeats = f" ×{line.count} since {format_duration(line.first_t)}" if line.count > 1 else ""
    # The reason first: on a narrow panel the URL is what the ellipsis takes.
    message = f"{line.message}{repeats} — {line.url}"
    detail = "\n".join(
        [
            f"{format_duration(line.last_t)}  scrape_error",
            "",
            f"url: {line.url}",
            f"reason: {line.message}",
            f"failed scrapes: {line.count}",
            f"first: {format_duration(line.first_t)}  last: {format_duration(line.last_t)}",
        ]
    )
    return EventRow(line.last_t, "scrape_error", one_line(message), detail)


def event_rows(snapshot: Snapshot) -> list[EventRow]:
    """The log's lines in time order, the newest ``MAX_SHOWN``."""
    events = snapshot.events
    rows: list[EventRow]
    if snapshot.scrape_errors:
        rows = [event_row(e) for e in events if e.kind != "scrape_error"]
        rows += [scrape_error_row(line) for line in snapshot.scrape_errors]
    else:
        rows = [event_row(e) for e in events]
    rows.sort(key=lambda row: row.t)
    return rows[-MAX_SHOWN:]


def event_line(row: EventRow) -> Text:
    """time, kind and message in fixed columns on one line; the message is cut with an
    ellipsis where the line ends."""
    line = Text(no_wrap=True, overflow="ellipsis", end="")
    line.append(format_duration(row.t), style="dim")
    line.append(" ")
    line.append(f"{kind_label(row.kind):<{KIND_WIDTH}}", style=KIND_STYLES.get(row.kind, ""))
    line.append(" ")
    line.append(row.message)
    return line


def error_summary(errors: dict[str, int]) -> Text:
    summary = Text("errors: ", style="bold red", no_wrap=True, overflow="ellipsis")
    summary.append(", ".join(f"{cls} ×{n}" for cls, n in sorted(errors.items())))
    return summary


class EventDetail(ModalScreen[None]):
    """One event's whole text; esc, enter or q closes it."""

    BINDINGS = [Binding("escape,enter,q", "close", "close")]

    def __init__(self, row: EventRow) -> None:
        super().__init__()
        self.row = row

    def compose(self) -> ComposeResult:
        with Vertical(id="event-detail-box"):
            yield Static(f"Event at {format_duration(self.row.t)}", classes="dialog-title")
            with VerticalScroll(id="event-detail-text"):
                yield Static(Text(self.row.detail, overflow="fold"))
            yield Static("esc, enter or q closes", classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)


class EventList(OptionList):
    """The log's lines: ``↑`` ``↓`` select one, ``enter`` opens it (``EventLog`` keeps the
    newest selected unless the user has moved up)."""


class EventLog(Vertical):
    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Events"
        self._shown: tuple | None = None
        self.rows: list[EventRow] = []

    def compose(self) -> ComposeResult:
        yield Static("no events yet", classes="event-errors")
        yield EventList(classes="event-lines")

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        errors = errors_by_class(snapshot)
        key = (
            len(snapshot.events),
            sum(errors.values()),
            tuple((line.count, line.last_t) for line in snapshot.scrape_errors),
        )
        if key == self._shown:
            return
        self._shown = key
        summary = self.query_one(".event-errors", Static)
        summary.update(error_summary(errors) if errors else "")
        summary.display = bool(errors)
        rows = event_rows(snapshot)
        lines = self.query_one(EventList)
        following = lines.highlighted is None or lines.highlighted >= len(self.rows) - 1
        highlighted = lines.highlighted
        self.rows = rows
        lines.clear_options()
        if rows:
            lines.add_options([Option(event_line(row)) for row in rows])
        else:
            lines.add_option(Option(Text("no events yet", style="dim"), disabled=True))
        if rows:
            lines.highlighted = len(rows) - 1 if following or highlighted is None else min(highlighted, len(rows) - 1)
            if following:
                lines.scroll_end(animate=False)
        # Repaint the whole panel, not only the lines: its empty rows and border must not
        # keep whatever was last drawn over them.
        self.refresh()

    def on_show(self) -> None:
        # The panel that comes into view (the events tab, or the wide layout after a
        # resize hid whatever had the focus) takes the keys, so ↑ ↓ enter work at once.
        self.query_one(EventList).focus()

    def on_option_list_option_selected(self, message: OptionList.OptionSelected) -> None:
        message.stop()
        if 0 <= message.option_index < len(self.rows):
            self.app.push_screen(EventDetail(self.rows[message.option_index]))
