"""`R`: restart the run's server with other engine arguments.

The command is edited in place; the argument diff against the running server is shown
as it is typed (or the one line that says why the text cannot be run); `tab` switches how
the load resumes: from the start of the ramp or at the current rate.
`enter` applies a command that can run, `esc` leaves everything as it was."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from rampwatch.core.controls import ServerControl
from rampwatch.core.errors import UserError
from rampwatch.core.figures.segments import RESUME_CHOICES, RESUME_TEXT


class RestartDialog(ModalScreen[tuple[str, str] | None]):
    """Returns (command text, resume choice) on enter, None on escape."""

    BINDINGS = [
        Binding("escape", "cancel", "cancel"),
        Binding("enter", "apply", "restart", show=False, priority=True),
        Binding("tab", "toggle_resume", "resume choice", show=False, priority=True),
    ]

    def __init__(self, server: ServerControl, resume: str = "current") -> None:
        super().__init__()
        self.server = server
        self.resume = resume if resume in RESUME_CHOICES else "current"
        self.problem: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="restart-box"):
            yield Static("Restart the server with these arguments", classes="dialog-title")
            # The cursor at the end, nothing selected: a key typed edits the command rather
            # than replacing all of it.
            yield Input(self.server.command, id="restart-command", select_on_focus=False)
            yield Static("", id="restart-diff")
            yield Static("Then resume the load:", classes="dialog-label")
            yield Static(self.choices_text(), id="restart-resume")
            yield Static(
                "the load stops (in-flight requests get the stop grace), the server restarts, "
                "the recording gets the change; enter: restart · tab: switch · esc: cancel",
                classes="dialog-hint",
            )

    def on_mount(self) -> None:
        field = self.query_one(Input)
        field.focus()
        field.cursor_position = len(field.value)
        self.show_diff(self.server.command)

    def show_diff(self, text: str) -> None:
        """The diff of ``text`` against the running server, or why it cannot run."""
        diff = self.query_one("#restart-diff", Static)
        try:
            preview = self.server.preview(text)
        except UserError as exc:
            self.problem = str(exc)
            diff.update(Text(f"✗ {exc}"))
            diff.set_class(True, "refused")
            return
        self.problem = None
        diff.update(Text(f"changes: {preview}"))
        diff.set_class(False, "refused")

    def on_input_changed(self, event: Input.Changed) -> None:
        self.show_diff(event.value)

    def choices_text(self) -> str:
        return "\n".join(f"{'(•)' if c == self.resume else '( )'} {RESUME_TEXT[c]}" for c in RESUME_CHOICES)

    def action_toggle_resume(self) -> None:
        others = [c for c in RESUME_CHOICES if c != self.resume]
        self.resume = others[0]
        self.query_one("#restart-resume", Static).update(self.choices_text())

    def action_apply(self) -> None:
        text = self.query_one(Input).value
        self.show_diff(text)
        if self.problem is not None:
            self.app.bell()
            return  # refused: the line says why; nothing is stopped
        self.dismiss((text, self.resume))

    def action_cancel(self) -> None:
        self.dismiss(None)
