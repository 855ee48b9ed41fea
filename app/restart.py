"""Restarting the run's server with other engine arguments (the live screen's `R`).

The server (``loadgen.server.managed.ManagedServer``) belongs to the process the user started;
the load runs in the forked run process. ``ServerRestarter`` is the UI's
``core.controls.ServerControl`` and runs a restart in a thread of this process:

1. ``pause_for_restart`` to the run: no new sends, in-flight requests get the stop grace
   and are then cancelled (counted); the run says when none is left (an ``info`` event
   with ``data["restart"] == "drained"``, seen in its snapshots);
2. the old server is stopped and the new one started (its log goes where the old one's
   went); ``on_server`` hands the new one to whoever owns the run's server;
3. ``resume_after_restart`` with the new command (secrets masked) and the argument diff:
   the run records the ``config`` mark and resumes as the user chose;
   or, if the new server fails to start, ``restart_failed`` with its one line: the run is
   recorded as failed and stops, its summary and recording kept (``on_failure`` keeps
   the reason for the exit code).

A command is refused with one line, and nothing stopped, when it cannot be parsed (empty,
unbalanced quotes, a program not found), runs another program, or would listen
elsewhere (the run keeps sending to the same URL).
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable
from typing import Protocol

from rampwatch.core.controls import SnapshotSource
from rampwatch.core.errors import ServerExited, UserError
from rampwatch.core.figures.segments import RESUME_CHOICES, diff_text
from rampwatch.core.redact import REDACTED
from rampwatch.loadgen.server.managed import ManagedServer, ServeCommand, _entry_length, diff_engine_args

# How often the restart thread looks at the run's snapshots for the end of the drain.
DRAIN_POLL_S = 0.1
DEFAULT_RESTART_TIMEOUT_S = 600.0


class RestartControl(Protocol):
    """The run's side of a restart (``loadgen.run.runner.Run``, or the pipe to it)."""

    def pause_for_restart(self) -> None: ...
    def resume_after_restart(self, command: str, diff: list, resume: str) -> None: ...
    def restart_failed(self, message: str, exit_code: int | None = None, log_tail: list[str] | None = None) -> None: ...


def drained_after(snapshot_events: list, since: int) -> bool:
    """Whether the run has said, after its ``since``-th event, that nothing is in flight."""
    return any(e.kind == "info" and e.data.get("restart") == "drained" for e in snapshot_events[since:])


def unmask(text: str, command: ServeCommand) -> str:
    """``text`` edited from ``command.shown``: each word still showing a masked secret
    (``--api-key=<redacted>``, ``HF_TOKEN=<redacted>``, the value after ``--api-key``)
    gets the command's own word back, so a secret never has to be typed on screen. A
    masked word that cannot be traced back is refused."""
    if REDACTED not in text:
        return text
    try:
        shown, real, words = shlex.split(command.shown), shlex.split(command.text), shlex.split(text)
    except ValueError as exc:
        raise UserError(f"--serve {text!r}: {exc}") from None
    # The same masked word may stand for several secrets: they come back in their order.
    secrets: dict[str, list[str]] = {}
    if len(shown) == len(real):
        for masked, word in zip(shown, real, strict=True):
            if REDACTED in masked:
                secrets.setdefault(masked, []).append(word)
    restored = [secrets[word].pop(0) if secrets.get(word) else word for word in words]
    if any(REDACTED in word for word in restored):
        raise UserError(f"a masked value ({REDACTED}) that is not the running command's: type the value again")
    return shlex.join(restored)


class ServerRestarter:
    """``ServerControl`` over a ``ManagedServer`` and the run it serves."""

    def __init__(
        self,
        server: ManagedServer,
        control: RestartControl,
        snapshots: SnapshotSource,
        *,
        timeout_s: float = DEFAULT_RESTART_TIMEOUT_S,
        on_server: Callable[[ManagedServer | None], None] = lambda server: None,
        on_failure: Callable[[UserError], None] = lambda error: None,
    ) -> None:
        self.server = server
        self.control = control
        self.snapshots = snapshots
        self.timeout_s = timeout_s
        self.on_server = on_server
        self.on_failure = on_failure
        self.thread: threading.Thread | None = None
        self.failure: UserError | None = None
        self.starting: ManagedServer | None = None  # the new server while it starts

    @property
    def command(self) -> str:
        return self.server.command.shown

    def log_tail(self) -> list[str]:
        """The last log lines of the server starting, else of the one serving (the
        screen's server log follows the restart)."""
        return (self.starting or self.server).tail

    @property
    def busy(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def parse(self, text: str) -> ServeCommand:
        """The new command, or ``UserError`` with the one line that says why not."""
        old = self.server.command
        new = old.with_text(unmask(text, old))
        if tuple(new.argv[: _entry_length(list(new.argv))]) != tuple(old.argv[: _entry_length(list(old.argv))]):
            raise UserError(
                f"{new.argv[0]!r} is another program: R restarts the same server with other arguments "
                "(start another run for another server)"
            )
        if new.base_url != old.base_url:
            raise UserError(f"the server must stay at {old.base_url} (the run sends there): keep --host and --port")
        return new

    def preview(self, text: str) -> str:
        if self.busy:
            raise UserError("a restart is under way")
        new = self.parse(text)
        return diff_text(diff_engine_args(self.server.command, new))

    def restart(self, text: str, resume: str) -> None:
        if self.busy:
            raise UserError("a restart is under way")
        new = self.parse(text)
        if resume not in RESUME_CHOICES:
            raise UserError(f"resume: expected one of {', '.join(RESUME_CHOICES)}, got {resume!r}")
        self.thread = threading.Thread(target=self._restart, args=(new, resume), name="server-restart", daemon=True)
        self.thread.start()

    def _restart(self, new: ServeCommand, resume: str) -> None:
        old = self.server
        since = len(self.snapshots.snapshot().events)
        self.control.pause_for_restart()
        deadline = time.monotonic() + self.timeout_s
        while not drained_after(self.snapshots.snapshot().events, since):
            if self.snapshots.snapshot().state in ("stopping", "done") or time.monotonic() > deadline:
                return  # stopped meanwhile: the server stays as it was
            time.sleep(DRAIN_POLL_S)
        diff = diff_engine_args(old.command, new)
        self.on_server(None)  # a stopped server is not a server that exited on its own
        old.stop()
        server = ManagedServer(new, log_path=old.log_path, on_log=old.on_log, connection=old.connection)
        self.starting = server
        try:
            server.start(self.timeout_s)
        except UserError as exc:  # ServerExited, a taken port, a timeout: one line each
            self.failure = exc
            self.on_failure(exc)
            code = exc.server_exit_code if isinstance(exc, ServerExited) else None
            tail = exc.tail if isinstance(exc, ServerExited) else server.tail
            self.control.restart_failed(f"restart: {exc}", code, tail[-10:])
            return
        except Exception as exc:  # e.g. the program cannot be run: the run must not stay paused
            error = UserError(f"{type(exc).__name__}: {exc}")
            self.failure = error
            self.on_failure(error)
            self.control.restart_failed(f"restart: {error}", None, server.tail[-10:])
            return
        self.server, self.starting = server, None
        self.on_server(server)
        self.control.resume_after_restart(new.shown, [list(row) for row in diff], resume)
