"""The live keys: in which run states each acts, and how the run confirms it.

Every steering call goes through the run's ``RunControl``, which records it as an event;
the app toasts a call once its event is in a snapshot (the values the run applied), and
says so when one never comes. ``LiveSteering`` holds the keys' actions for ``RampwatchApp``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rampwatch.core.controls import RunControl, ServerControl
from rampwatch.core.timeline import Event, Snapshot
from rampwatch.tui.chart_data import format_duration, rate_step
from rampwatch.tui.mark_dialog import MarkDialog
from rampwatch.tui.restart_dialog import RestartDialog

# A mixin of RampwatchApp: checked as the App it is mixed into, a plain class at run time
# (Textual sees one App subclass).
if TYPE_CHECKING:
    from textual.app import App

    _AppBase = App[int | str]
else:
    _AppBase = object

# The live keys' actions and the run states in which each acts; in any other state the
# key is shown dimmed in the footer and, if pressed, says why (``why_unavailable``).
STEERING_STATES = ("ramping", "holding")
ACTION_STATES = {
    "toggle_hold": STEERING_STATES,
    "rate_up": STEERING_STATES,
    "rate_down": STEERING_STATES,
    "mark": ("ramping", "holding", "restarting", "draining", "stopping"),
    "stop_run": ("ramping", "holding", "restarting", "draining"),
    "end_drain": ("draining", "stopping"),
    "restart_server": STEERING_STATES,
}
LIVE_ACTIONS = set(ACTION_STATES)
# How long a steering key waits for its event to come back from the run before it says
# the run did not take it: run seconds, counted from the first snapshot after the key
# (a UI slowed down by a busy machine must not call a late confirmation a refusal).
CONFIRM_TIMEOUT_S = 5.0
CONFIRMATION_TOAST_S = 3.0
# The events a steering action comes back as (what the recording holds).
ACTION_EVENTS = {
    "hold": ("hold",),
    "resume": ("resume",),
    "rate": ("set_rate",),
    "mark": ("mark",),
    "stop": ("stop",),
    "cancel": ("cancel",),
    "restart": ("set_rate",),  # the load paused at 0 req/s for the restart
}
NO_SERVER = "rampwatch did not start this server (--serve): it cannot restart it"


def why_unavailable(action: str, state: str) -> str | None:
    """Why a live key cannot act in this run state (None: it can)."""
    if state in ACTION_STATES[action]:
        return None
    if state == "done":
        return "the run has finished and its recording is closed" if action == "mark" else "the run has finished"
    if state == "starting":
        return "the run has not started yet"
    if state == "restarting":
        return "the server is restarting: the load resumes once the new one serves"
    if action == "end_drain":
        return "nothing to cancel: x ends the drain once the schedule is over or stopped"
    if action == "stop_run":
        return "already stopping: in-flight requests have the grace period (x cancels them now)"
    if state == "draining":
        return "the schedule is over: the run is only waiting for its in-flight requests"
    return "the run is stopping"


@dataclass
class AwaitedEvent:
    """A steering call whose event has not come back from the run yet."""

    kinds: tuple[str, ...]
    after: int  # how many events the run had when the call was made
    what: str  # for the message when it does not come
    since_t: float | None = None  # run time of the first snapshot after the call


def confirmation(event: Event, events: list[Event]) -> str:
    """The toast for a steering call the run has applied: the recorded event's own text
    (so the toast says exactly what the recording says)."""
    if event.kind == "mark":
        number = sum(1 for e in events if e.kind == "mark" and e.t <= event.t)
        note = event.data.get("note") or ""
        return f"mark M{number} recorded at {format_duration(event.t)}" + (f": {note}" if note else "")
    if event.kind == "set_rate" and "delta_rps" in event.data:
        return f"rate {event.data['delta_rps']:+g} rps: {event.message}"
    return event.message


class LiveSteering(_AppBase):
    """The live keys' actions (``RampwatchApp``'s ``check_action`` lets them act only in a
    live run with a control, in the states ``ACTION_STATES`` names)."""

    control: RunControl | None
    server: ServerControl | None  # the run's own server (--serve), which R restarts
    server_log: Callable[[], list[str]] | None
    latest: Snapshot
    rate_step_rps: float | None
    _pending_hold: bool | None  # the hold state asked for, until a snapshot shows it
    _awaited: list[AwaitedEvent]
    _claimed: set[int]  # indices of events a toast has already confirmed
    _events_announced: int  # events already looked at for a restart's outcome

    if TYPE_CHECKING:

        def set_server_log_shown(self, shown: bool) -> None: ...

    def _steered(self) -> RunControl:
        """The run's control: the live keys act only when there is one."""
        assert self.control is not None
        return self.control

    def _await_event(self, what: str) -> None:
        self._awaited.append(AwaitedEvent(ACTION_EVENTS[what], len(self.latest.events), what))

    def _confirm_steering(self, snapshot: Snapshot) -> None:
        """Toast each steering call once its event is in the run's snapshot (with the
        values the run applied and recorded); say so when one never comes."""
        waiting = []
        for awaited in self._awaited:
            found = next(
                (
                    i
                    for i in range(awaited.after, len(snapshot.events))
                    if snapshot.events[i].kind in awaited.kinds and i not in self._claimed
                ),
                None,
            )
            if found is not None:
                self._claimed.add(found)
                self.notify(confirmation(snapshot.events[found], snapshot.events), timeout=CONFIRMATION_TOAST_S)
            elif awaited.since_t is None:
                awaited.since_t = snapshot.t
                waiting.append(awaited)
            elif snapshot.t - awaited.since_t > CONFIRM_TIMEOUT_S:
                self.notify(
                    f"{awaited.what}: the run did not take it (state {snapshot.state}); nothing was recorded",
                    severity="warning",
                    timeout=5,
                )
            else:
                waiting.append(awaited)
        self._awaited = waiting

    def _announce_restarts(self, snapshot: Snapshot) -> None:
        """A restart's outcome, when the run records it: the new configuration is serving
        (the recorded diff), or the new server did not start (the run stops)."""
        for event in snapshot.events[self._events_announced :]:
            if event.kind == "config":
                self.notify(event.message, timeout=CONFIRMATION_TOAST_S * 2)
            elif event.kind == "error" and event.data.get("restart") == "failed":
                self.notify(event.message, severity="error", timeout=10)
        self._events_announced = len(snapshot.events)

    def holding(self) -> bool:
        return self._pending_hold if self._pending_hold is not None else self.latest.state == "holding"

    def action_toggle_hold(self) -> None:
        if self.holding():
            self._steered().resume()
            self._pending_hold = False
            self._await_event("resume")
        else:
            self._steered().hold()
            self._pending_hold = True
            self._await_event("hold")

    def _step(self) -> float:
        configured = self.rate_step_rps
        if configured is None and self.latest.header is not None:
            configured = self.latest.header.options.get("rate_step")
        return rate_step(self.latest.target_rps, configured)

    def action_rate_up(self) -> None:
        self._steered().step_rate(self._step())
        self._pending_hold = True
        self._await_event("rate")

    def action_rate_down(self) -> None:
        self._steered().step_rate(-self._step())
        self._pending_hold = True
        self._await_event("rate")

    def action_mark(self) -> None:
        def answered(note: str | None) -> None:
            if note is None:
                return
            reason = why_unavailable("mark", self.latest.state)
            if reason:  # the run ended while the note was typed
                self.notify(f"mark not added: {reason}", severity="warning", timeout=5)
                return
            self._steered().mark(note)
            self._await_event("mark")

        self.push_screen(MarkDialog(format_duration(self.latest.t)), answered)

    def action_stop_run(self) -> None:
        self._steered().stop()
        self._await_event("stop")

    def action_restart_server(self) -> None:
        """R: edit the server's arguments; applying pauses the load, restarts the server
        and resumes as chosen (``ServerControl.restart``, the run records the change)."""
        server = self.server
        assert server is not None  # check_action: R acts only with the run's own server

        def answered(choice: tuple[str, str] | None) -> None:
            if choice is None:
                return
            reason = why_unavailable("restart_server", self.latest.state)
            if reason:  # the run moved on while the command was edited
                self.notify(f"restart not started: {reason}", severity="warning", timeout=5)
                return
            server.restart(*choice)
            self._await_event("restart")
            if self.server_log is not None:  # the new server's start, as its log comes
                self.set_server_log_shown(True)

        self.push_screen(RestartDialog(server), answered)

    def action_end_drain(self) -> None:
        """Cancel every request still in flight now rather than wait for it (recorded as
        a cancel event; the requests are counted as cancelled)."""
        self._steered().cancel_in_flight()
        self._await_event("cancel")
