"""`m`: ask for the note of a user mark."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class MarkDialog(ModalScreen[str | None]):
    """Returns the note (possibly empty) on enter, None on escape."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, at: str) -> None:
        super().__init__()
        self.at = at

    def compose(self) -> ComposeResult:
        with Vertical(id="mark-box"):
            yield Static(f"Mark at {self.at}", classes="dialog-title")
            yield Input(placeholder="note (e.g. raised max-num-seqs)", id="mark-note")
            yield Static("enter to add · esc to cancel", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
