"""The per-step results table (``core.figures.steps``): one row per step, tenth of a ramp,
hold, manual rate or drain, newest at the bottom. The columns and their text are the
ones ``rampwatch report`` prints; on a narrow panel the least useful columns go first."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from rampwatch.core.figures.steps import NARROW_DROP, STEP_COLUMNS, step_cells, step_columns
from rampwatch.core.timeline import Snapshot, StepRow


def _needed(headers: list[tuple[str, str]], cells: list[dict[str, str]]) -> int:
    """Cells a table of these (column, header) pairs needs for these rows: each column as
    wide as its header or widest text, one space between columns."""
    return sum(max(len(header), *(len(row[name]) for row in cells)) for name, header in headers) + len(headers) - 1


def columns_for(
    width: int, cells: list[dict[str, str]], all_columns: tuple[tuple[str, str], ...] = STEP_COLUMNS
) -> list[tuple[str, str]]:
    """(column, header) pairs of ``all_columns`` that fit ``width`` cells: the full headers
    when every column fits with them, else the short ones, dropping the columns of
    ``NARROW_DROP`` in turn until the rest fits."""
    full = [(name, name) for name, _ in all_columns]
    if _needed(full, cells) <= width:
        return full
    columns = list(all_columns)
    for name in NARROW_DROP:
        if _needed(columns, cells) <= width:
            break
        columns = [c for c in columns if c[0] != name]
    return columns


class StepTable(Widget):
    """Shows ``Snapshot.steps``; redrawn only when a row's text changes."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Steps"
        self.border_subtitle = "sent in the row: latencies ms · achieved: ended OK (N+: at least N)"
        self._rows: list[StepRow] = []
        self._shown: list[dict[str, str]] | None = None

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        cells = [step_cells(row) for row in snapshot.steps]
        if cells == self._shown:
            return
        relayout = self._shown is None or len(cells) != len(self._shown)
        self._rows, self._shown = list(snapshot.steps), cells
        self.refresh(layout=relayout)

    def render(self) -> Table | Text:
        if not self._shown:
            return Text("no steps yet: the first row starts with the run", style="italic")
        # The newest rows matter most: when they do not all fit, the oldest scroll off.
        room = max(1, (self.size.height or 20) - 1)
        shown = self._shown[-room:]
        columns = columns_for(self.size.width or 80, shown, step_columns(self._rows))
        table = Table(box=None, padding=(0, 1, 0, 0), expand=False, show_edge=False, header_style="bold")
        for name, short in columns:
            table.add_column(short, justify="left" if name == "kind" else "right", no_wrap=True)
        for cells in shown:
            table.add_row(*[cells[name] for name, _ in columns])
        return table
