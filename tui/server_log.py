"""The server rampwatch started (``--serve``, or the embedded simulator): its log and its
startup phase.

- ``ServerLogPanel``: the server's last log lines, from a callable (the managed server's
  tail, already redacted). In the live app, ``o`` shows and hides it; it is live-only,
  since a recording does not hold the log (it sits beside the recording, in
  ``RECORDING.server.log``).
- ``ServerStartApp``: what the screen shows while the server starts, before the run's own
  screen: ``STARTING SERVER`` with the seconds so far, the command, and the log as it
  comes. ``start()`` (blocking: the server's start and readiness wait) runs in a worker
  thread; the app returns ``StartOutcome``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from rampwatch.tui.chart_data import format_duration

SERVER_LOG_TITLE = "Server log"
# The log panel follows the server at this rate (lines come in bursts while a model loads).
LOG_REFRESH_S = 0.5


class ServerLogPanel(Static):
    """The last lines of the server's log that fit, newest at the bottom (a long line is
    cut: the whole of it is in the log file)."""

    DEFAULT_CSS = """
    ServerLogPanel { text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, lines: Callable[[], list[str]], *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.lines = lines
        self._shown: list[str] | None = None
        self.border_title = SERVER_LOG_TITLE

    def on_mount(self) -> None:
        self.refresh_lines()
        self.set_interval(LOG_REFRESH_S, self.refresh_lines, name="server-log")

    def on_resize(self) -> None:
        self._shown = None
        self.refresh_lines()

    def refresh_lines(self) -> None:
        if not self.display:
            return
        lines = self.lines()
        rows = max(1, self.content_size.height or 1)
        visible = lines[-rows:]
        if visible == self._shown:
            return
        self._shown = visible
        if not visible:
            self.update(Text("(no output from the server yet)", style="dim"))
            return
        self.update(Text("\n".join(visible), no_wrap=True, overflow="ellipsis"))


@dataclass(frozen=True)
class StartOutcome:
    """How the startup phase ended: ``ready`` (the server serves), ``cancelled`` (the user
    quit), or ``error`` (the exception ``start()`` raised, for the command line to show)."""

    ready: bool = False
    cancelled: bool = False
    error: BaseException | None = None


class ServerStartApp(App[StartOutcome]):
    """``STARTING SERVER`` with elapsed seconds and the server's log, until ``start()``
    returns (the run's screen follows) or raises, or the user quits: then ``cancel()``
    (which must stop the server) runs in a thread, ``start()`` sees the server go, and the
    app leaves once both have returned (it cannot leave a thread behind)."""

    CSS = """
    #start-header { height: 2; background: $panel; text-wrap: nowrap; text-overflow: ellipsis; }
    #start-log { height: 1fr; border: round $primary 50%; border-title-style: bold; padding: 0 1; }
    """
    TITLE = "rampwatch"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "cancel", "stop the server and quit"),
        Binding("ctrl+q,ctrl+c", "cancel", "quit", show=False, priority=True),
    ]

    def __init__(
        self,
        *,
        command: str,
        target: str,
        pid: Callable[[], int | None],
        log_lines: Callable[[], list[str]],
        start: Callable[[], object] | None,
        cancel: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.command = command
        self.target = target
        self.pid = pid
        self.log_lines = log_lines
        self.start_server = start
        self.cancel_start = cancel
        self.clock = clock
        self.started_at = clock()
        self._cancelled = False

    def compose(self) -> ComposeResult:
        yield Static(id="start-header")
        yield ServerLogPanel(self.log_lines, id="start-log")
        yield Footer()

    def on_mount(self) -> None:
        self.update_header()
        self.set_interval(1.0, self.update_header, name="startup-clock")
        if self.start_server is not None:
            self.run_worker(self._start, thread=True, name="server-start", exit_on_error=False)

    def header_text(self) -> Text:
        elapsed = max(0.0, self.clock() - self.started_at)
        line1 = Text(no_wrap=True, overflow="ellipsis")
        line1.append(" rampwatch ", style="bold reverse")
        line1.append(" ")
        line1.append("STARTING SERVER", style="bold yellow")
        line1.append(f"  {format_duration(elapsed)}")
        pid = self.pid()
        if pid is not None:
            line1.append("  pid ", style="dim")
            line1.append(str(pid))
        line1.append("  waiting for ", style="dim")
        line1.append("/health", style="bold")
        line1.append(" and a model in ", style="dim")
        line1.append("/v1/models", style="bold")
        line2 = Text(no_wrap=True, overflow="ellipsis")
        line2.append(" serve ", style="dim")
        line2.append(self.command)
        line2.append("  target ", style="dim")
        line2.append(self.target)
        return Text("\n", no_wrap=True, overflow="ellipsis").join([line1, line2])

    def update_header(self) -> None:
        if self._cancelled:
            return
        self.query_one("#start-header", Static).update(self.header_text())

    def _start(self) -> None:
        assert self.start_server is not None
        try:
            self.start_server()
        except BaseException as exc:  # shown by the command line once the screen is gone
            self._finish(StartOutcome(cancelled=self._cancelled, error=None if self._cancelled else exc))
            return
        self._finish(StartOutcome(ready=True))

    def _finish(self, outcome: StartOutcome) -> None:
        try:
            self.call_from_thread(self.exit, outcome)
        except RuntimeError:  # the app has already gone
            pass

    def action_cancel(self) -> None:
        """``q``, ``ctrl+c``, SIGTERM, SIGHUP: stop the server and leave."""
        if self._cancelled:
            return
        self._cancelled = True
        if self.start_server is None or self.cancel_start is None:
            self.exit(StartOutcome(cancelled=True))
            return
        stopping = Text(no_wrap=True)
        stopping.append(" rampwatch ", style="bold reverse")
        stopping.append("  STOPPING SERVER", style="bold red")
        self.query_one("#start-header", Static).update(stopping)
        # The start worker returns once the server is gone, and then ends the app.
        self.run_worker(self.cancel_start, thread=True, name="server-stop", exit_on_error=False)
