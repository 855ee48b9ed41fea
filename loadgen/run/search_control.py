"""``rampwatch search`` inside a run: a controller on the run's event loop that steers the
schedule (``search_rate``; the hand's keys do nothing meanwhile), judges what it sent, and
records each step as a ``search`` event. The decisions are ``core.figures.search``'s; this module only
times them.

The scenario's ramp gives the range: the controller walks it as a staircase of short
windows (each judged on the requests sent in it, once they ended, while the next one
runs); the first window that breaks the SLO brackets the answer, and so does the run's
knee (its detector's event): past it the server no longer keeps up, the windows' requests
end ever later, and walking on would only pile up a queue the holds then wait out. At
the knee the load steps back to the last level that met the SLO while the windows below
the knee are judged. Then it holds one
level at a time: a drain (nothing sent until every request of the levels before ended,
so each hold starts from an empty queue), a settle (``settle_s`` at the level), the
judged part (the hold rule), the wait for its requests to end (under the level's load
for as long as the hold was judged, then with nothing more sent), the verdict. At the
ramp's end, too, the load steps back while the last windows are judged. When the search
is over the schedule ends and the run drains as usual.

Every event's ``data["search"]`` says what it is: ``"window"`` (a ramp window judged),
``"knee"`` (the ramp stopped at the knee), ``"bracket"``, ``"drain"`` (before a hold),
``"hold"`` (a hold begins: its level), ``"verdict"`` (a hold judged: the
``Hold``'s dict) and ``"result"`` (``Search.to_dict()``, once, at the end).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any, Protocol

from rampwatch.core.errors import UserError
from rampwatch.core.figures.search import (
    UNFINISHED_AFTER_S,
    Search,
    SearchPlan,
    Verdict,
    figures_text,
    judge,
    level_text,
    ramp_window_s,
)
from rampwatch.core.timeline import Event, NullSink, RequestRecord


class SteeredRun(Protocol):
    """What the controller uses of its run (``loadgen.run.steering.RunSteering``)."""

    schedule: Any
    sink: Any
    _sending: dict[int, float]
    _sent_total: int
    _finished: bool

    def now(self) -> float: ...
    def _steering(self) -> bool: ...
    def search_rate(self, rps: float) -> None: ...
    def end_schedule(self) -> None: ...


# How long the requests of a judged window may stay in flight after it; those still in
# flight then count as failed (they did not answer in time).
JUDGE_WAIT_S = UNFINISHED_AFTER_S
# Windows a ramp is walked in at most.
MAX_RAMP_STEPS = 200
# How long a hold's drain waits for the requests of the levels before to end, at most.
DRAIN_WAIT_S = 180.0
POLL_S = 0.1


def search_range(spec: dict[str, Any], by: str) -> tuple[float, float, float] | None:
    """(start, end, duration) of a schedule a search can walk: a rate ramp (linear,
    exponential) for ``rate``, a users ramp for ``concurrency``; None otherwise."""
    kind = spec.get("kind")
    if by == "rate" and kind in ("linear", "exponential"):
        return float(spec["start_rps"]), float(spec["end_rps"]), float(spec["duration_s"])
    if by == "concurrency" and kind == "users" and "start_users" in spec:
        return float(spec["start_users"]), float(spec["end_users"]), float(spec["duration_s"])
    return None


def check_schedule(plan: SearchPlan, schedule: dict[str, Any]) -> None:
    """A search walks a ramp: a rate ramp (``--by rate``) or a users ramp (``--by
    concurrency``), of a duration, not of a number of requests. One line otherwise."""
    kind = schedule.get("kind")
    if search_range(schedule, plan.by) is None:
        wanted = (
            "a linear or exponential rate ramp (start_rps → end_rps)"
            if plan.by == "rate"
            else "a users ramp (kind: users, start_users → end_users, a session workload)"
        )
        raise UserError(f"--by {plan.by}: the scenario's schedule (kind {kind}) is not {wanted}: the search walks it")
    start, end, _ = search_range(schedule, plan.by) or (0.0, 0.0, 0.0)
    if end <= start:
        names = ("start_rps", "end_rps") if plan.by == "rate" else ("start_users", "end_users")
        raise UserError(
            f"schedule.{names[1]} {end:g}: a search walks a rising ramp, from {names[0]} {start:g} up: give a higher end"
        )
    if schedule.get("num_requests") is not None:
        raise UserError("schedule.num_requests: a search ends when it has its answer; give the ramp a duration only")


def staircase(start: float, end: float, steps: int, by: str) -> list[float]:
    """The ramp's levels, one per window, above ``start`` up to ``end`` (a level of 0
    sends nothing to judge; users are whole and each level is new)."""
    levels = [start + (end - start) * (k + 1) / steps for k in range(steps)]
    if by == "concurrency":
        levels = sorted({float(max(1, round(level))) for level in levels})
    return [level for level in levels if level > 0]


class SearchControl(NullSink):
    """The run's search: a sink of its records (the judged windows') and its driver task."""

    def __init__(self, run: SteeredRun, plan: SearchPlan) -> None:
        self.run = run
        self.plan = plan
        spec_range = search_range(run.schedule.spec, plan.by)
        assert spec_range is not None, "the app checks the schedule before the run"
        start, end, self.ramp_s = spec_range
        self.search = Search(plan, start, end)
        self._records: list[RequestRecord] = []
        self._keep_from = 0.0
        self._ramping = False
        self._set_levels: list[tuple[float, float]] = []  # (t, level): the ramp's steps
        self.knee_level: float | None = None  # the level in force at the knee's onset

    def on_event(self, event: Event) -> None:
        if event.kind == "knee" and self._ramping and self.knee_level is None:
            data = event.data or {}
            onset = data.get("onset_t")
            level = self._level_at(float(onset) if isinstance(onset, (int, float)) else event.t)
            offered = data.get("offered_rps")
            if self.plan.by == "rate" and isinstance(offered, (int, float)) and 0 < offered < level:
                # the knee the screen shows: the rate its window averaged, below the step in
                # force at its onset on a rising ramp (on the H100 preset 34.8 against 45.2)
                level = float(offered)
            self.knee_level = level

    def _level_at(self, t: float) -> float:
        """The ramp's level in force at ``t`` (its start before the first step)."""
        level = self.search.floor
        for t_set, set_level in self._set_levels:
            if t_set > t:
                break
            level = set_level
        return level

    # -- the sink: records of the windows still to be judged
    def on_request(self, record: RequestRecord) -> None:
        if record.sent_at >= self._keep_from:
            self._records.append(record)

    # -- the driver
    def _over(self) -> bool:
        return not self.run._steering()  # noqa: SLF001 - the controller is part of the run

    def _unfinished(self, t_from: float, t_to: float) -> int:
        return sum(1 for sent in self.run._sending.values() if t_from <= sent < t_to)  # noqa: SLF001

    async def _judged(self, t_from: float, t_to: float) -> Verdict:
        """The verdict on the requests sent in ``[t_from, t_to)``, once they ended (or
        ``JUDGE_WAIT_S`` passed: those still in flight count as failed)."""
        await self._wait_until(lambda: not self._unfinished(t_from, t_to), JUDGE_WAIT_S)
        return self._judge_now(t_from, t_to)

    async def _wait_until(self, done: Callable[[], bool], limit_s: float) -> None:
        """Polls ``done`` every ``POLL_S`` (the run's state changes it without an event of
        its own) until it holds, ``limit_s`` passed or the run stops steering."""
        deadline = self.run.now() + limit_s
        for _ in itertools.count():
            if done() or self.run.now() >= deadline or self._over():
                return
            await asyncio.sleep(POLL_S)

    def _judge_now(self, t_from: float, t_to: float) -> Verdict:
        judged = [r for r in self._records if t_from <= r.sent_at < t_to]
        verdict = judge(judged, self.plan.slo, self._unfinished(t_from, t_to))
        self._forget_before(t_to)
        return verdict

    def _forget_before(self, t: float) -> None:
        self._records = [r for r in self._records if r.sent_at >= t]
        self._keep_from = max(self._keep_from, t)

    def _event(self, what: str, message: str, **data: Any) -> None:
        self.run.sink.on_event(Event(self.run.now(), "search", message, {"search": what, **data}))

    def _level(self, level: float) -> str:
        return level_text(level, self.plan.by)

    async def drive(self) -> None:
        """The whole search; the schedule ends with it (the run then drains)."""
        try:
            await self._ramp()
            if not self._over():
                await self._holds()
        finally:
            # Stopped (Ctrl-C, `s`) or over: the result is recorded either way, so the
            # summary, the result JSON and report keep the holds already judged.
            if not self.run._finished:  # noqa: SLF001 - after the end the recording is closed
                result = self.search.to_dict()
                self._event("result", result["line"], result=result)
            if not self._over():
                self.run.end_schedule()

    async def _ramp(self) -> None:
        window = ramp_window_s(self.ramp_s)
        steps = max(1, round(self.ramp_s / window))
        if steps > MAX_RAMP_STEPS:  # a ramp of days: longer windows, not a list of millions
            steps, window = MAX_RAMP_STEPS, self.ramp_s / MAX_RAMP_STEPS
        levels = staircase(self.search.floor, self.search.ceiling, steps, self.plan.by)
        self._event(
            "start",
            f"under SLO {self.plan.slo.text}: ramp {self._level(self.search.floor)} → "
            f"{self._level(self.search.ceiling)} in {window:g} s windows; {self.plan.hold_rule}",
            slo=self.plan.slo.text,
            by=self.plan.by,
            hold_rule=self.plan.hold_rule,
        )
        waiting: list[tuple[float, float, float]] = []  # (level, from, to), oldest first
        self._ramping = True
        try:
            await self._walk(levels, window, waiting)
        finally:
            self._ramping = False

    async def _walk(self, levels: list[float], window: float, waiting: list[tuple[float, float, float]]) -> None:
        for level in levels:
            if self._over():
                return
            if self.knee_level is not None:
                await self._stop_at_knee(self.knee_level, waiting)
                return
            self.run.search_rate(level)
            self._set_levels.append((self.run.now(), level))
            t_from = self.run.now()
            await asyncio.sleep(window)
            waiting.append((level, t_from, self.run.now()))
            # The windows whose requests all ended (or waited long enough), oldest first,
            # judged while the next window runs.
            while waiting and (not self._unfinished(*waiting[0][1:]) or self.run.now() - waiting[0][2] > JUDGE_WAIT_S):
                if self._window(*waiting.pop(0), None):
                    return
        if self.knee_level is None:
            # The ramp's end: back to the last level that met the SLO while the last windows
            # are judged (holding the top would pile up a queue if it is past the limit); a
            # knee that comes meanwhile still ends it as at the knee.
            s = self.search
            self.run.search_rate(s.last_pass if s.last_pass is not None else s.floor)
            for level, t_from, t_to in waiting:
                if self._over():
                    return
                if self.knee_level is not None and level >= self.knee_level:
                    continue
                if self._window(level, t_from, t_to, await self._judged(t_from, t_to)):
                    return
            if self.knee_level is None:
                s.ramp_ended()
                self._bracketed()
                return
            waiting = []  # judged above: only the knee's bracket is left
        await self._stop_at_knee(self.knee_level, waiting)

    async def _stop_at_knee(self, knee: float, waiting: list[tuple[float, float, float]]) -> None:
        """The ramp ends at the knee: back to the last level that met the SLO (else the
        start) while the windows below the knee are judged; then the knee brackets it
        (unless a window below it broke the SLO: that one does)."""
        s = self.search
        below = s.pass_below(knee)
        back = below if below is not None else s.floor
        self.run.search_rate(back)
        self._event(
            "knee",
            f"ramp stops at the knee ({self._level(knee)}): back to {self._level(back)} "
            "while the windows below it are judged",
            level=knee,
        )
        for level, t_from, t_to in waiting:
            if level >= knee:  # sent at or past the knee: above the bracket, not judged
                continue
            if self._over():
                return
            if self._window(level, t_from, t_to, await self._judged(t_from, t_to)):
                return
        s.knee_reached(knee)
        self._bracketed()

    def _window(self, level: float, t_from: float, t_to: float, verdict: Verdict | None) -> bool:
        if verdict is None:
            verdict = self._judge_now(t_from, t_to)
        figures = figures_text(verdict.figures)
        if not verdict.requests:
            outcome = "no request was sent in it: not judged"
        else:
            outcome = "meets the SLO" if verdict.passed else f"breaks the SLO: {'; '.join(verdict.breaks)}"
        self._event(
            "window",
            f"ramp at {self._level(level)}: {figures or 'no figures'}; {outcome}",
            level=level,
            passed=verdict.passed,
            requests=verdict.requests,
        )
        if self.search.ramp_window(level, verdict):
            self._bracketed()
            return True
        return False

    def _bracketed(self) -> None:
        s = self.search
        assert s.lo is not None and s.hi is not None and s.tol is not None
        self._event(
            "bracket",
            f"bracket: {self._level(s.lo)} – {self._level(s.hi)}, tolerance {s.tol:g}",
            lo=s.lo,
            hi=s.hi,
            tolerance=s.tol,
        )

    async def _holds(self) -> None:
        while (level := self.search.next_level()) is not None:
            if self._over() or not await self._hold(level):
                return

    async def _drain(self, level: float) -> None:
        """Nothing is sent until every request of the levels before has ended (at most
        ``DRAIN_WAIT_S``): a hold starts from an empty queue, so a queue a level above left
        is never judged as this level's."""
        in_flight = len(self.run._sending)  # noqa: SLF001
        if not in_flight:
            return
        self.run.search_rate(0.0)
        self._event(
            "drain",
            f"drain before the hold at {self._level(level)}: {in_flight} requests of the levels before in flight",
            in_flight=in_flight,
        )
        await self._wait_until(lambda: not self.run._sending, DRAIN_WAIT_S)  # noqa: SLF001
        left = len(self.run._sending)  # noqa: SLF001
        if left and not self._over():
            self._event(
                "drain",
                f"drain ended after {DRAIN_WAIT_S:g} s with {left} requests still in flight: "
                "the hold may read their queue",
                in_flight=left,
            )

    async def _hold(self, level: float) -> bool:
        """One hold, judged; False when the run stopped steering before its verdict."""
        run = self.run
        await self._drain(level)
        if self._over():
            return False
        run.search_rate(level)
        self._event("hold", f"hold at {self._level(level)}", level=level)
        await asyncio.sleep(self.plan.settle_s)  # the settle: the level's own queue forms
        t_from = run.now()
        self._forget_before(t_from)  # what was sent before is not judged
        sent_from = run._sent_total  # noqa: SLF001
        await self._wait_until(
            lambda: self.plan.hold_over(run.now() - t_from, run._sent_total - sent_from),  # noqa: SLF001
            float("inf"),
        )
        if self._over():
            return False
        t_to = run.now()
        # The hold's requests end under its load, for as long as it was judged at most; then
        # nothing more is sent while the rest end: past the max, a queue would only grow,
        # and the next hold would have to drain it.
        await self._wait_until(lambda: not self._unfinished(t_from, t_to), min(JUDGE_WAIT_S, t_to - t_from))
        if self._unfinished(t_from, t_to) and not self._over():
            run.search_rate(0.0)
        verdict = await self._judged(t_from, t_to)
        if self._over():
            return False
        hold = self.search.held(level, verdict, t_to - t_from)
        figures = figures_text(hold.figures)
        outcome = "PASS" if hold.passed else f"FAIL: {'; '.join(hold.breaks)}"
        self._event(
            "verdict",
            f"hold at {self._level(level)} for {hold.seconds:.0f} s, {hold.requests} requests: "
            f"{figures or 'no figures'}; {outcome}",
            hold=hold.to_dict(),
        )
        return True
