"""`q` while a run is active: stop the run and quit, or go back."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class QuitDialog(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "stop and quit"),
        Binding("enter", "answer(True)", "stop and quit", show=False),
        Binding("n", "answer(False)", "keep running"),
        Binding("escape", "answer(False)", "keep running", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Static("A run is active.", classes="dialog-title")
            yield Static("Stop it (drain in-flight requests, finish the recording) and quit?")
            yield Static("y / enter: stop and quit · n / esc: keep running", classes="dialog-hint")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
