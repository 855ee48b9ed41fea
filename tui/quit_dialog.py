"""`q` while a run is active: stop the run and quit, or go back; on a screen attached to a
run in another process (`rampwatch attach`), also leave it running (detach)."""

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


class DetachDialog(ModalScreen[str | None]):
    """`q` on a screen attached to a run (`rampwatch attach`): "detach" leaves the run
    going (attach again later), "stop" stops it, None goes back."""

    BINDINGS = [
        Binding("d", "answer('detach')", "detach"),
        Binding("enter", "answer('detach')", "detach", show=False),
        Binding("s", "answer('stop')", "stop the run"),
        Binding("n", "answer(None)", "back"),
        Binding("escape", "answer(None)", "back", show=False),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Static(f"Attached to run {self.run_id}.", classes="dialog-title")
            yield Static(f"Detach: the run goes on (rampwatch attach {self.run_id} watches it again).")
            yield Static("Stop the run: drain in-flight requests, finish the recording.")
            yield Static("d / enter: detach · s: stop the run and quit · n / esc: back", classes="dialog-hint")

    def action_answer(self, answer: str | None) -> None:
        self.dismiss(answer)
