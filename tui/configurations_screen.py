"""`g`: the run's server configurations side by side (after a restart): one column per
configuration, the engine arguments that differ first, then each one's figures
(``core.figures.segments``: the run-so-far summary of the requests sent while it served)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from rampwatch.core.figures.segments import SEGMENT_NOTE, SegmentTable


def configurations_renderable(table: SegmentTable) -> Table:
    grid = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    grid.add_column("", no_wrap=True)
    for column in table.columns:
        grid.add_column(column, justify="right", no_wrap=True)
    for i, (label, cells) in enumerate(table.rows):
        style = "bold green" if i < table.argument_count else ""
        grid.add_row(
            Text(label, style=style),
            *(Text(cell, style=style) for cell in cells),
            end_section=i + 1 == table.argument_count,
        )
    return grid


class ConfigurationsScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape,g,q", "close", "close"),
    ]

    def __init__(self, table: SegmentTable) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        with Vertical(id="configs-box"):
            yield Static("Configurations", classes="dialog-title")
            yield Static(configurations_renderable(self.table), id="configs-table")
            commands = "\n".join(f"{c}: {cmd}" for c, cmd in zip(self.table.columns, self.table.commands) if cmd)
            yield Static(Text(commands, no_wrap=False), id="configs-commands", classes="dialog-label")
            yield Static(f"{SEGMENT_NOTE} · esc, g or q closes", classes="dialog-hint")

    def update_table(self, table: SegmentTable) -> None:
        """A newer snapshot's figures (live: the open table follows the run)."""
        if table != self.table:
            self.table = table
            self.query_one("#configs-table", Static).update(configurations_renderable(table))

    def action_close(self) -> None:
        self.dismiss(None)
