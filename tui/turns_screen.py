"""`u`: a session workload's figures by turn index (``core.figures.turns``): per turn the
requests, errors, TTFT p50/p99, input tokens and the prefix-cache hit rate, with a bar
for TTFT p50 (against the slowest turn) and one for the hit rate (0–100 %), so that "TTFT
falls and the hit rate rises from turn 2" reads at a glance; above, the sessions: totals
from the records, and active / started / finished per second from the session series when
the run has them. The same in replay (the replay's builder folds the recorded requests)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from rampwatch.core.figures.turns import NO_HIT_RATE_HINT, TURNS_NOTE, TurnRow, TurnTable, number_text, sessions_line
from rampwatch.core.timeline import Snapshot
from rampwatch.tui.chart_data import current_value, format_rate, recent_rate

TTFT_BAR = 14
HIT_BAR = 10
_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(fraction: float | None, width: int) -> str:
    """A horizontal bar ``width`` cells long at full scale, in eighths of a cell; empty for
    None, clamped to 0…1."""
    if fraction is None:
        return ""
    eighths = round(min(max(fraction, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def _ttft(row: TurnRow, key: str) -> float | None:
    return None if row.ttft_ms is None else row.ttft_ms[key]


def turns_renderable(table: TurnTable) -> Table:
    slowest = max((v for v in (_ttft(r, "p50") for r in table.rows) if v is not None), default=None)
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for name in ("turn", "requests", "errors", "TTFT p50 ms", "p99"):
        grid.add_column(name, justify="right", no_wrap=True)
    grid.add_column("", no_wrap=True, width=TTFT_BAR, style="cyan")
    grid.add_column("input tok", justify="right", no_wrap=True)
    grid.add_column("hit %", justify="right", no_wrap=True)
    grid.add_column("", no_wrap=True, width=HIT_BAR, style="green")
    for row in table.rows:
        p50 = _ttft(row, "p50")
        grid.add_row(
            row.turn,
            str(row.requests),
            Text(str(row.errors), style="red" if row.errors else ""),
            number_text(p50),
            number_text(_ttft(row, "p99")),
            bar(None if p50 is None or not slowest else p50 / slowest, TTFT_BAR),
            number_text(row.input_tokens_mean, ".0f"),
            number_text(row.hit_rate_pct),
            bar(None if row.hit_rate_pct is None else row.hit_rate_pct / 100, HIT_BAR),
        )
    return grid


def sessions_text(snapshot: Snapshot, table: TurnTable) -> str:
    """The totals line, with the run's active sessions and session rates (its session
    series, over the last complete seconds) when it has them."""
    active = current_value(snapshot, "sessions_active")
    line = sessions_line(table.sessions, None if active is None else round(active))
    started = recent_rate(snapshot, "sessions_started_per_s")
    finished = recent_rate(snapshot, "sessions_finished_per_s")
    if started is not None or finished is not None:
        line += f"\nsessions/s: started {format_rate(started)} · finished {format_rate(finished)}"
    return line


class TurnsScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,u,q", "close", "close"),
    ]

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        assert snapshot.turns is not None
        self.snapshot = snapshot

    def compose(self) -> ComposeResult:
        table = self.snapshot.turns
        with Vertical(id="turns-box"):
            yield Static("Turns", classes="dialog-title")
            yield Static(sessions_text(self.snapshot, table), id="turns-sessions")
            yield Static(turns_renderable(table), id="turns-table")
            yield Static(self._hint(table), id="turns-hint", classes="dialog-hint")

    @staticmethod
    def _hint(table: TurnTable) -> str:
        hint = f"{TURNS_NOTE} · esc, u or q closes"
        return hint if table.hit_rate_reported else f"{NO_HIT_RATE_HINT}\n{hint}"

    def update_snapshot(self, snapshot: Snapshot) -> None:
        """A newer snapshot's figures (live: the open table follows the run; replay: the position)."""
        previous, self.snapshot = self.snapshot, snapshot
        table = snapshot.turns
        if table is None:  # a replay sought back before the first turn ended
            self.query_one("#turns-table", Static).update("no turn has ended yet at this point of the run")
            return
        sessions = sessions_text(snapshot, table)
        if table == previous.turns and sessions == sessions_text(previous, table):
            return  # nothing new: no redraw
        self.query_one("#turns-sessions", Static).update(sessions)
        self.query_one("#turns-table", Static).update(turns_renderable(table))
        self.query_one("#turns-hint", Static).update(self._hint(table))

    def action_close(self) -> None:
        self.dismiss(None)
