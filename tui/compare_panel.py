"""Compare mode: B against A per metric over the whole runs, with the bootstrap verdict.

The rows are ``record.cli_compare.compare_rows``' (the same figures and verdicts as
`rampwatch compare`); the app computes them off the UI thread and hands them over once.
A wide panel shows A, B, the change, the interval of B − A and the verdict; a narrow one
(the side column) the change and the verdict only, and the load warning on one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from rampwatch.tui.chart_data import format_number

# (compare_rows key, short label) shown on screen; `rampwatch compare` prints them all.
PANEL_ROWS = (
    ("request_throughput", "req/s"),
    ("output_throughput", "output tok/s"),
    ("error_rate_pct", "errors %"),
    ("median_ttft_ms", "TTFT p50 ms"),
    ("p99_ttft_ms", "TTFT p99 ms"),
    ("median_itl_ms", "ITL p50 ms"),
    ("p99_itl_ms", "ITL p99 ms"),
    ("mean_tpot_ms", "TPOT mean ms"),
    ("p99_e2el_ms", "E2E p99 ms"),
)
VERDICT_STYLE = {"better": "bold green", "worse": "bold red"}
VERDICT_SHORT = {
    "better": "B better",
    "worse": "B worse",
    "within noise": "noise",
    "negligible": "< 1%",
    "too few samples": "few data",
}


def panel_rows(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    by_key = {r["key"]: r for r in rows}
    return [(label, by_key[key]) for key, label in PANEL_ROWS if key in by_key]


def decimals_for(row: Mapping[str, Any]) -> int:
    """Decimals for B − A and its interval: one more than the figures themselves show
    (a change is smaller than the figure)."""
    size = max(abs(v) for v in (row["a"], row["b"], 0.0) if v is not None)
    return 0 if size >= 1000 else 1 if size >= 100 else 2


def signed(value: float, decimals: int) -> str:
    return f"{value:+,.{decimals}f}"


def interval_text(row: Mapping[str, Any]) -> str:
    """B − A and its interval, e.g. ``-29.8 [-56.5, -20.8]`` (the change alone when untested)."""
    if row["delta"] is None:
        return "–"
    places = decimals_for(row)
    text = signed(row["delta"], places)
    if row["low"] is not None:
        text += f" [{signed(row['low'], places)}, {signed(row['high'], places)}]"
    return text


def change_text(row: Mapping[str, Any]) -> str:
    return "–" if row["change_pct"] is None else f"{row['change_pct']:+.1f}%"


class ComparePanel(Widget):
    FULL_MIN_WIDTH = 72

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "B vs A"
        self.rows: list[Mapping[str, Any]] | None = None
        self.warning: str | None = None
        self.failure: str | None = None

    def set_comparison(self, rows: Sequence[Mapping[str, Any]], warning: str | None) -> None:
        self.rows, self.warning = list(rows), warning
        self.refresh(layout=True)

    def set_failure(self, message: str) -> None:
        self.failure = message
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        if self.rows is None:
            return 1
        # the wide panel wraps the warning; the side column's keeps to one line (the toast
        # and `rampwatch compare` have it whole)
        full = width >= self.FULL_MIN_WIDTH
        warning_lines = 0 if not self.warning else (-(-len(self.warning) // max(width - 8, 1)) if full else 1)
        return 1 + len(panel_rows(self.rows)) + warning_lines  # the heading row, the metrics

    def render(self) -> Group | str:
        if self.failure is not None:
            return self.failure
        if self.rows is None:
            return "comparing the runs…"
        full = self.size.width >= self.FULL_MIN_WIDTH
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column("metric", ratio=1, no_wrap=True, overflow="ellipsis")
        if full:
            table.add_column("A", justify="right", no_wrap=True)
            table.add_column("B", justify="right", no_wrap=True)
        table.add_column("change", justify="right", no_wrap=True)
        if full:
            table.add_column("B − A [95%]", justify="right", no_wrap=True)
        table.add_column("verdict", no_wrap=True)
        heads = ["metric", *(["A", "B"] if full else []), "change", *(["B − A [95%]"] if full else []), "verdict"]
        table.add_row(*(Text(h, style="bold") for h in heads))
        for label, row in panel_rows(self.rows):
            verdict = row["verdict"]
            cells: list[Text | str] = [Text(label, style="dim")]
            if full:
                cells += [format_number(row["a"]), format_number(row["b"])]
            cells.append(change_text(row))
            if full:
                cells.append(interval_text(row))
            cells.append(Text(VERDICT_SHORT.get(verdict, verdict), style=VERDICT_STYLE.get(verdict, "dim")))
            table.add_row(*cells)
        parts: list = []
        if self.warning:
            warning = Text(self.warning, style="bold yellow")
            if not full:
                warning.no_wrap, warning.overflow = True, "ellipsis"
            parts.append(warning)
        parts.append(table)
        return Group(*parts)
