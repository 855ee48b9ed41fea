"""rampwatch search on the live screen (and in replay): a line under the header listing
its holds as they come, each level with its judged seconds, the SLO's figures and PASS
or FAIL, the hold running highlighted, then its answer. Hidden for a run without a
search. ``search_banner_text`` is pure (tested without Textual)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from rampwatch.core.figures.search import search_holds, search_result
from rampwatch.core.timeline import Event, Snapshot


def _level(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "?"


def search_banner_text(events: list[Event]) -> Text | None:
    """``S ttft_p90<300ms · ramp … · bracket 2.9–4.8 · 2.9 2s 68ms ✓ · [3.85 …]`` or the
    answer once there is one; None without a search."""
    searches = [e for e in events if e.kind == "search"]
    if not searches:
        return None
    text = Text(end="")
    text.append(" S ", style="bold white on blue")
    start = next((e for e in searches if e.data.get("search") == "start"), None)
    if start is not None:
        text.append(f" {start.data.get('slo', '')} ", style="bold")
    bracket = next((e for e in reversed(searches) if e.data.get("search") == "bracket"), None)
    if bracket is None:
        window = next((e for e in reversed(searches) if e.data.get("search") == "window"), None)
        where = f" (last window judged: {_level(window.data.get('level'))})" if window is not None else ""
        text.append(f"· ramping to bracket it{where}", style="dim")
    else:
        text.append(f"· bracket {_level(bracket.data.get('lo'))}–{_level(bracket.data.get('hi'))}", style="dim")
    for hold in search_holds(searches):
        text.append(" · ")
        figures = " ".join(
            f"{v:.1f}%err" if k == "error_rate" else f"{v:.0f}ms"
            for k, v in (hold.get("figures") or {}).items()
            if isinstance(v, (int, float))
        )
        if hold.get("passed") is None:
            text.append(f"[{_level(hold.get('level'))} holding…]", style="bold reverse")
            continue
        seconds = hold.get("seconds") or 0.0
        text.append(f"{_level(hold.get('level'))} {seconds:.0f}s {figures} ".replace("  ", " "))
        text.append("PASS" if hold.get("passed") else "FAIL", style="bold green" if hold.get("passed") else "bold red")
    result = search_result(searches)
    if result is not None:
        text.append(f" → {result.get('line', '')}", style="bold")
    return text


class SearchBanner(Static):
    """Hidden until the run's first search event; redrawn when a search event comes."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.display = False
        self._shown = 0  # the search events drawn

    def show_snapshot(self, snapshot: Snapshot, compare: Snapshot | None = None) -> None:
        events = [e for e in snapshot.events if e.kind == "search"]
        if len(events) == self._shown:
            return
        self._shown = len(events)
        text = search_banner_text(events)
        self.display = text is not None
        if text is not None:
            self.update(text)
