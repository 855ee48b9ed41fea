"""The live view of a sweep: which configuration runs (its arguments and the run's latest
progress line), progress through the matrix (i of N, elapsed, ETA), and the table filling
in, from the sweep's state (``sweep.json``, as ``rampwatch.app.sweep.run`` writes it).

``sweep_progress`` is the pure part (tested without Textual); ``SweepApp`` polls a state
source and draws it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widget import Widget
from textual.widgets import Footer, Static

from rampwatch.core.figures.search_best import NO_RESULT, max_text, search_unit, searched
from rampwatch.core.figures.sweep_text import NOT_REACHED, format_pareto, table_cells
from rampwatch.tui.chart_data import format_duration

FINISHED = ("done", "failed", "interrupted")
# On a narrow panel these columns go first, in this order (the knee, good-put, the p99s,
# KV and the limit stay: they answer "which configuration, and why").
NARROW_DROP = ("ITL p50", "TTFT p50", "preempt", "tok/s/user", "out tok/s")


def _needed(cells: list[list[str]], columns: list[int]) -> int:
    return sum(max(len(row[i]) for row in cells) for i in columns) + len(columns) - 1


def columns_for(width: int, cells: list[list[str]]) -> list[int]:
    """Indexes of the table's columns that fit ``width`` cells (one space between
    columns), dropping ``NARROW_DROP`` in turn; the config column is then cut to fit
    (``config_width``)."""
    keep = list(range(len(cells[0])))
    for header in NARROW_DROP:
        if _needed(cells, keep) <= width:
            break
        keep = [i for i in keep if cells[0][i] != header]
    return keep


def cut_left(text: str, width: int) -> str:
    """``text`` in ``width`` cells, cut at its start: a configuration's values are at
    its end, its flags' common prefix at its start."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1 :]


def config_width(width: int, cells: list[list[str]], shown: list[int]) -> int:
    """Room left for the config column (index 1) beside the others shown, at least 12."""
    others = [i for i in shown if i != 1]
    return max(12, min(max(len(row[1]) for row in cells), width - _needed(cells, others) - 1))


def sweep_progress(state: dict[str, Any], now: float) -> dict[str, Any]:
    """Finished and total configurations, elapsed seconds, and the ETA: the mean duration
    of the configurations finished in this sweep times those left (None before the first
    ends: nothing to go by)."""
    rows = state.get("rows", [])
    finished = [r for r in rows if r.get("status") in FINISHED]
    measured = [r["duration_s"] for r in finished if isinstance(r.get("duration_s"), (int, float))]
    left = len(rows) - len(finished)
    eta = None
    if measured and left:
        eta = sum(measured) / len(measured) * left
        current = state.get("current")
        if current is not None and rows[current].get("started_at"):  # the running one is partly done
            eta = max(0.0, eta - min(now - rows[current]["started_at"], sum(measured) / len(measured)))
    started = state.get("started_at")
    now = state.get("ended_at") or now  # a finished sweep's clock stops
    return {
        "finished": len(finished),
        "total": len(rows),
        "elapsed_s": None if started is None else max(0.0, now - started),
        "eta_s": 0.0 if not left else eta,
    }


def _fmt(seconds: float | None) -> str:
    return "—" if seconds is None else format_duration(seconds)


class SweepPanel(Widget):
    """The sweep's progress, current configuration and table."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = "Sweep"
        self.state: dict[str, Any] | None = None
        self.now = time.time()
        self.log_tail = ""

    def show(self, state: dict[str, Any] | None, now: float, log_tail: str = "") -> None:
        self.state, self.now, self.log_tail = state, now, log_tail
        self.refresh(layout=True)

    def render(self) -> Group | Text:
        state = self.state
        if state is None:
            return Text(self.log_tail or "starting the sweep…", style="italic")
        p = sweep_progress(state, self.now)
        rows = state["rows"]
        head = Text()
        head.append(f"{state.get('sweep')}", style="bold")
        head.append(f"  {p['finished']} of {p['total']} configurations done")
        head.append(f"  ·  elapsed {_fmt(p['elapsed_s'])}  ·  ETA {_fmt(p['eta_s'])}")
        head.append(f"  ·  SLO {state.get('slo')}")
        current = state.get("current")
        now_text = Text()
        if current is not None:
            row = rows[current]
            now_text.append(f"now #{current + 1}: ", style="bold")
            now_text.append(row["config"], style="bold cyan")
            now_text.append(f"  ({row.get('status')})\n")
            now_text.append(f"  {row['command']}\n", style="dim")
            now_text.append(f"  {state.get('current_line') or ''}")
        elif state.get("finished"):
            now_text.append("sweep finished — q to quit and print the table", style="bold green")
        else:
            now_text.append(self.log_tail or "between configurations", style="italic")
        cells = table_cells(rows)
        width = max(20, (self.size.width or 160) - 2)
        shown = columns_for(width, cells)
        table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, header_style="bold")
        last = len(cells[0]) - 1
        for i in shown:
            table.add_column(
                cells[0][i],
                justify="left" if i in (0, 1, last) else "right",
                no_wrap=True,
            )
        room = config_width(width, cells, shown)
        for row, row_cells in zip(rows, cells[1:], strict=True):
            style = "bold" if row["index"] == current else ("green" if row["index"] == state.get("best") else "")
            if row.get("status") == "pending":
                style = "dim"
            texts = [row_cells[i] if i != 1 else cut_left(row_cells[i], room) for i in shown]
            table.add_row(*texts, style=style)
        best = state.get("best")
        verdict = Text()
        if searched(state):  # load: search: by the confirmed max under the SLO
            verdict = search_verdict(state)
        elif best is not None:
            best_row = rows[best]
            verdict.append("best so far (on the front, max good-put): ", style="bold")
            verdict.append(f"#{best + 1} {best_row['config']}\n", style="green")
            verdict.append(f"  {best_row.get('vllm_command') or best_row['command']}", style="dim")
        tied = [] if searched(state) else state.get("tied") or []
        if best is None and tied:  # repeats whose good-put intervals overlap: no single best
            verdict.append("tied so far (good-put intervals overlap): ", style="bold")
            verdict.append(", ".join(f"#{i + 1} {rows[i]['config']}" for i in tied), style="yellow")
        for i in state.get("not_reached") or []:
            verdict.append(f"\n#{i + 1} {NOT_REACHED}: not judged", style="yellow")
        parts: list[Any] = [head, Text(""), now_text, Text(""), table, Text("")]
        if verdict:
            parts += [verdict, Text("")]
        if self.size.height >= 30:
            parts.append(Text(format_pareto(rows, width=60, height=8)))
        return Group(*parts)


def search_verdict(state: dict[str, Any]) -> Text:
    """A searched sweep's verdict so far (``search_best``): the best by its confirmed max
    under the SLO, or the tied ones, and the configurations whose search found no max."""
    rows, best, tied = state["rows"], state.get("best"), state.get("tied") or []
    unit = search_unit(state)
    verdict = Text()
    if best is not None:
        row = rows[best]
        verdict.append("best so far (highest confirmed max under the SLO): ", style="bold")
        verdict.append(f"#{best + 1} {row['config']} — max {max_text(row, unit)}\n", style="green")
        verdict.append(f"  {row.get('vllm_command') or row['command']}", style="dim")
    elif tied:
        verdict.append("tied so far (max intervals overlap): ", style="bold")
        verdict.append(", ".join(f"#{i + 1} {rows[i]['config']}" for i in tied), style="yellow")
    for i in state.get("no_max") or []:
        why = rows[i].get("search_failure") or NO_RESULT
        verdict.append(f"\n#{i + 1} no max under the SLO ({why}): not judged", style="yellow")
    return verdict


class SweepApp(App[int]):
    """Polls ``source`` (the sweep's state, or None before it exists) twice a second;
    ``q`` asks ``on_quit`` to stop the sweep (it stops the running configuration, its
    server, and writes the state) and leaves."""

    CSS = "SweepPanel { border: round $accent; height: 1fr; padding: 0 1; }"
    BINDINGS = [Binding("q", "quit_sweep", "quit (stops the sweep; --resume continues it)")]

    def __init__(
        self,
        source: Callable[[], dict[str, Any] | None],
        *,
        on_quit: Callable[[], None] = lambda: None,
        log_tail: Callable[[], str] = lambda: "",
        clock: Callable[[], float] = time.time,
        refresh_s: float = 0.5,
    ) -> None:
        super().__init__()
        self.source, self.on_quit, self.log_tail, self.clock = source, on_quit, log_tail, clock
        self.refresh_s = refresh_s

    def compose(self) -> ComposeResult:
        yield Static("rampwatch sweep", id="title")
        yield SweepPanel(id="sweep")
        yield Footer()

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(self.refresh_s, self.poll)

    def poll(self) -> None:
        self.query_one(SweepPanel).show(self.source(), self.clock(), self.log_tail())

    def action_quit_sweep(self) -> None:
        self.on_quit()
        self.exit(0)
