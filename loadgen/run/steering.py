"""Steering a live run: ``RunControl``'s calls (``hold``/``resume``/``set_rate``/
``step_rate``/``mark``/``stop``/``cancel_in_flight``), the stops an error makes, and the
run's side of a server restart. Every call must be made on the run's event loop thread;
under the UI, the run process's pipe reader makes them there (``app.bridge``).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from rampwatch.core.figures.segments import RESUME_CHOICES, config_event
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.core.timeline import Event
from rampwatch.loadgen.run.run_state import RunState
from rampwatch.loadgen.workload.schedule_spec import USERS_KIND
from rampwatch.loadgen.workload.sessions import users_for, users_message


class RunSteering(RunState):
    """A run's ``RunControl`` calls and its side of a server restart."""

    # -- RunControl ----------------------------------------------------------------------
    def _steering(self) -> bool:
        """Whether the schedule can still be steered: not once a stop was asked for or
        the run has finished (a call then changes nothing and records nothing)."""
        return not self._stopping and not self._finished

    def _changed(self, event: Event) -> None:
        if self.schedule.kind == USERS_KIND:
            users_message(event)
        if event.data.get("applied", True):  # a change that changed nothing is not recorded
            self.sink.on_event(event)
        if self._schedule_changed is not None:
            self._schedule_changed.set()

    def _by_hand(self) -> bool:
        """Whether a hand's steering call (the UI's keys, ``rampwatch control``) may change
        the rate: not while ``rampwatch search`` steers it, whose holds would be judged at a
        level they were not held at (said once, as an event)."""
        if not self._steering():
            return False
        if self.search is None:
            return True
        if not self._refused_by_search:
            self._refused_by_search = True
            self.sink.on_event(
                Event(self.now(), "info", "rate keys do nothing during a search: it sets the rate itself", {})
            )
        return False

    def hold(self) -> None:
        if self._by_hand():
            self._changed(self.schedule.hold(self.now()))

    def resume(self) -> None:
        if self._by_hand():
            self._changed(self.schedule.resume(self.now()))

    def set_rate(self, rps: float) -> None:
        if self._by_hand():
            self._changed(self.schedule.set_rate(self.now(), max(0.0, rps)))

    def search_rate(self, rps: float) -> None:
        """The search's own rate (``loadgen.run.search_control``): a level, a drain's 0."""
        if self._steering():
            self._changed(self.schedule.set_rate(self.now(), max(0.0, rps)))

    def step_rate(self, delta_rps: float) -> None:
        if not self._by_hand():
            return
        t = self.now()
        if self.schedule.kind == USERS_KIND:  # users come whole: a step is one user at least
            step = int(math.copysign(max(1.0, round(abs(delta_rps))), delta_rps)) if delta_rps else 0
            event = self.schedule.set_rate(t, max(0, users_for(self.schedule.current_rate(t)) + step))
            event.data["delta_users"] = step
            self._changed(event)
        else:
            self._changed(self.schedule.step_rate(t, delta_rps))

    def end_schedule(self) -> None:
        """End the schedule as at its planned end (a search that is over: not a stop, so
        the run is not interrupted); the requests in flight drain as the policy says."""
        if self._steering():
            self.schedule.finish()
            if self._schedule_changed is not None:
                self._schedule_changed.set()

    def mark(self, note: str) -> None:
        if not self._finished:  # after the end the recording is closed
            self.sink.on_event(Event(self.now(), "mark", note or "mark", {"note": note}))

    def stop(self) -> None:
        """Graceful stop: no new requests; in-flight ones get ``stop_grace_s``. A stop
        before the schedule's end makes the run interrupted (exit code 130)."""
        if self._stopping or self._finished:
            return
        self._stopping = True
        if self.schedule.state != "done":
            self._interrupted = True
        if self.sessions is not None:  # no further turn; sessions thinking end now
            self.sessions.end_all()
        grace = self.options.stop_grace_s
        self.sink.on_event(
            Event(
                self.now(),
                "stop",
                f"stop requested: no new requests; in-flight ones get {grace:g} s",
                {"grace_s": grace},
            )
        )
        if self._schedule_changed is not None:
            self._schedule_changed.set()

    def interrupt(self) -> None:
        """Ctrl-C: the same graceful stop as the UI's."""
        self.stop()

    def server_exited(self, message: str, exit_code: int | None, log_tail: list[str]) -> None:
        """The server this run started exited on its own: an ``error`` event saying so (with
        its exit code and last log lines), then the usual stop."""
        self._stop_on_error(message, {"server_exit_code": exit_code, "server_log_tail": list(log_tail)})

    def _stop_on_error(self, message: str, data: dict[str, Any]) -> None:
        """An ``error`` event, then the usual stop (nothing once the run has finished)."""
        if self._finished:
            return
        self.sink.on_event(Event(self.now(), "error", message, data))
        self.stop()

    def worker_lost(self, message: str) -> None:
        """A load worker (process or Ray actor) was lost mid-run (its requests in flight
        already failed):
        an ``error`` event saying so, then the usual stop."""
        self._stop_on_error(message, {"load_worker_lost": True})

    def cancel_in_flight(self) -> None:
        """End the drain now (the UI's key, a second Ctrl-C): stop, and cancel every
        request in flight or waiting for a slot. Recorded as a ``cancel`` event; the
        cancelled requests are recorded as such and make the run interrupted."""
        if self._finished:
            return
        self.stop()
        self._cancel(list(self._in_flight), "ending the drain now")

    # -- a server restart (the app stops and starts the server between these calls) -------
    def pause_for_restart(self) -> None:
        """Stop the load for a server restart: no new sends (the schedule holds at 0, so
        its plan moves on while the server restarts); the requests in flight get the stop
        grace, then are cancelled (counted, not lost). An ``info`` event with
        ``data["restart"] == "drained"`` says when none is left in flight."""
        if not self._steering() or self._restart is not None:
            return
        t = self.now()
        self._restart = (t, self.schedule.state == "holding", self.schedule.current_rate(t))
        self._settle_knee(t)  # the overload of this configuration ends here
        event = self.schedule.set_rate(t, 0.0)
        event.message = "load paused for a server restart"
        event.data["restart"] = True
        self._changed(event)
        if self.sessions is not None:
            # A session does not span two configurations: each one's figures by turn are
            # of its own sessions (users start new ones when the load resumes).
            self.sessions.end_all()
        self._restart_drain = asyncio.ensure_future(self._drain_for_restart())

    async def _drain_for_restart(self) -> None:
        grace = self.options.stop_grace_s
        pending = set(self._in_flight)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace)
        if pending:
            self._cancel(list(pending), f"the server restarts: the {grace:g} s grace period is over", interrupts=False)
            await asyncio.gather(*pending, return_exceptions=True)
        if self._restart is not None and not self._finished:
            self.sink.on_event(
                Event(self.now(), "info", "no request in flight: restarting the server", {"restart": "drained"})
            )

    def resume_after_restart(self, command: str, diff: list, resume: str) -> None:
        """The new server serves: record the configuration mark (command, argument diff)
        and continue the schedule from its start or as it was (the ramp where it paused,
        or the rate it held)."""
        if self._restart is None or not self._steering():
            return
        paused_at, was_holding, rate = self._restart
        self._restart = None
        t = self.now()
        if resume == "start":
            event = self.schedule.restart(t)
        elif was_holding:
            event = self.schedule.set_rate(t, rate)
        else:
            event = self.schedule.resume(t)
        self._changed(event)
        diff_rows = [(str(name), old, new) for name, old, new in diff]
        for name, _old, new in diff_rows:
            if new is None:
                self._engine_args.pop(name, None)
            else:
                self._engine_args[name] = new
        self.knee.limits = ServerLimits.of_run(self._header, ServerLimits.from_engine_args(self._engine_args))
        self.sink.on_event(
            config_event(t, command, diff_rows, resume if resume in RESUME_CHOICES else "current", paused_at)
        )

    def restart_failed(self, message: str, exit_code: int | None = None, log_tail: list[str] | None = None) -> None:
        """The new server did not start: an ``error`` event with the reason (and the
        server's exit code and last log lines), then the usual stop; the run is failed."""
        self._restart = None
        if self._finished:
            return
        data = {"server_exit_code": exit_code, "server_log_tail": list(log_tail or []), "restart": "failed"}
        self.sink.on_event(Event(self.now(), "error", message, data))
        self.stop()
