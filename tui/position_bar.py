"""Replay position: play state, speed, time, and a bar with the knee (K), marks (M),
holds (H) and server restarts (C)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from rampwatch.tui.chart_data import format_duration


def bar_cells(position: float, duration: float, width: int, marks: list[tuple[float, str]]) -> str:
    """A ``width``-cell bar: '━' played, '─' to come, K/M/H/C where the knee, marks, holds
    and restarts fall."""
    if width <= 0:
        return ""
    fraction = 0.0 if duration <= 0 else min(max(position / duration, 0.0), 1.0)
    filled = round(fraction * width)
    cells = ["━"] * filled + ["─"] * (width - filled)
    for t, letter in marks:
        if duration > 0 and 0 <= t <= duration:
            cells[min(width - 1, int(t / duration * width))] = letter
    head = min(width - 1, max(0, filled - 1)) if filled else 0
    if cells[head] in "━─":
        cells[head] = "●"
    return "".join(cells)


class PositionBar(Widget):
    DEFAULT_CSS = "PositionBar { height: 1; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.position = 0.0
        self.duration = 0.0
        self.speed = 1.0
        self.playing = False
        self.marks: list[tuple[float, str]] = []

    def set_state(
        self, *, position: float, duration: float, speed: float, playing: bool, marks: list[tuple[float, str]]
    ) -> None:
        changed = (position, duration, speed, playing, marks) != (
            self.position,
            self.duration,
            self.speed,
            self.playing,
            self.marks,
        )
        self.position, self.duration, self.speed, self.playing, self.marks = position, duration, speed, playing, marks
        if changed:
            self.refresh()

    def render(self) -> Text:
        icon = "▶" if self.playing else "⏸"
        left = f" {icon} {self.speed:g}× {format_duration(self.position)} "
        right = f" {format_duration(self.duration)} "
        width = max(0, self.size.width - len(left) - len(right))
        text = Text(no_wrap=True)
        text.append(left, style="bold")
        bar = bar_cells(self.position, self.duration, width, self.marks)
        for ch in bar:
            style = {"━": "bold", "●": "bold", "K": "bold red", "M": "bold yellow", "H": "cyan", "C": "bold green"}.get(
                ch, "dim"
            )
            text.append(ch, style=style)
        text.append(right)
        return text
