"""`?`: the keys of the current mode."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

LIVE_KEYS = (
    ("space", "hold / resume the ramp"),
    ("+  -", "raise / lower the rate by a step (holds the ramp)"),
    ("m", "add a mark with a note"),
    ("s", "stop gracefully (no new requests, drain, finish)"),
    ("x", "while draining or stopping: cancel the in-flight requests now"),
    ("q  ctrl+c  ctrl+q", "quit (asks while a run is active; ctrl+c again: yes)"),
)
REPLAY_KEYS = (
    ("space", "play / pause"),
    ("[ ]  < >", "speed ×½ / ×2 (1×–16×)"),
    ("← →", "seek −10 s / +10 s"),
    ("shift+← →  pgup pgdn", "seek −1 min / +1 min"),
    ("home  end", "jump to start / end"),
    ("k", "jump to the knee"),
    ("n  p", "next / previous mark"),
    ("q", "quit"),
)
COMMON_KEYS = (
    ("1 … 7", "switch tab (narrow terminals)"),
    ("↑ ↓  enter", "events: select a line, show it whole"),
    ("c", "mouse capture off / on (off: the terminal selects text)"),
    ("?", "this help"),
)
CHART_KEY = (
    "Markers on every chart: K knee, H hold, R resume, M1 M2 … marks; (B) = compared run, dimmed. "
    "Dimmed keys in the footer cannot act now; pressed, they say why."
)


def keys_table(mode: str) -> Table:
    table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
    table.add_column("key", no_wrap=True)
    table.add_column("action")
    for key, action in (LIVE_KEYS if mode == "live" else REPLAY_KEYS) + COMMON_KEYS:
        table.add_row(key, action)
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss_help", "close"),
        Binding("question_mark", "dismiss_help", "close", show=False),
        Binding("q", "dismiss_help", "close", show=False),
    ]

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(f"rampwatch — {self.mode} keys", classes="dialog-title")
            yield Static(keys_table(self.mode))
            yield Static(CHART_KEY, classes="dialog-hint")
            yield Static("esc or ? to close", classes="dialog-hint")

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
