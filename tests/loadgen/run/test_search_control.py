"""The search's controller on a run's loop, against a fake run whose server meets the SLO
up to a known rate: it walks the ramp, holds, ends the schedule with the answer, and
records each step as a ``search`` event."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest

from rampwatch.core.errors import UserError
from rampwatch.core.figures import search as search_module
from rampwatch.core.figures.search import SearchPlan
from rampwatch.core.timeline import Event, RequestRecord
from rampwatch.loadgen.run import search_control
from rampwatch.loadgen.run.search_control import SearchControl, check_schedule, search_range, staircase

RAMP = {"kind": "linear", "start_rps": 1.0, "end_rps": 20.0, "duration_s": 10.0}
USERS = {"kind": "users", "start_users": 1, "end_users": 16, "duration_s": 10.0}


@pytest.mark.parametrize(
    ("spec", "by", "expected"),
    [
        (RAMP, "rate", (1.0, 20.0, 10.0)),
        ({**RAMP, "kind": "exponential"}, "rate", (1.0, 20.0, 10.0)),
        (USERS, "concurrency", (1.0, 16.0, 10.0)),
        (RAMP, "concurrency", None),
        (USERS, "rate", None),
        ({"kind": "users", "users": 4, "duration_s": 5.0}, "concurrency", None),
        ({"kind": "poisson", "rate": 3.0}, "rate", None),
    ],
)
def test_search_range(spec, by, expected):
    assert search_range(spec, by) == expected


def test_check_schedule_refuses_what_it_cannot_walk():
    plan = SearchPlan.from_flags("ttft_p99<500ms")
    check_schedule(plan, RAMP)
    with pytest.raises(UserError, match=r"--by rate: the scenario's schedule \(kind poisson\)"):
        check_schedule(plan, {"kind": "poisson", "rate": 3.0})
    with pytest.raises(UserError, match="schedule.num_requests"):
        check_schedule(plan, {**RAMP, "num_requests": 50})
    # a ramp that falls (or stays) has no bracket to find: said before the run
    with pytest.raises(UserError, match=r"schedule.end_rps 2: a search walks a rising ramp, from start_rps 30 up"):
        check_schedule(plan, {**RAMP, "start_rps": 30.0, "end_rps": 2.0})


@pytest.mark.parametrize(
    ("start", "end", "steps", "by", "expected"),
    [
        (0.0, 10.0, 5, "rate", [2.0, 4.0, 6.0, 8.0, 10.0]),
        (1.0, 3.0, 2, "rate", [2.0, 3.0]),
        (1.0, 4.0, 6, "concurrency", [2.0, 3.0, 4.0]),
        (0.0, 1.0, 4, "concurrency", [1.0]),
    ],
)
def test_staircase(start, end, steps, by, expected):
    assert staircase(start, end, steps, by) == pytest.approx(expected)


class Schedule:
    def __init__(self, spec):
        self.spec = spec
        self.rate = spec["start_rps"]
        self.finished = False


class FakeRun:
    """Sends at the rate set, every POLL; a request's TTFT is 0.1 s up to ``true_max``
    req/s, 1 s above; it ends at once (recorded to the controller and the sink)."""

    TICK = 0.01

    def __init__(self, true_max: float) -> None:
        self.true_max = true_max
        self.schedule = Schedule(RAMP)
        self.events: list[Event] = []
        self.sink = self
        self._sending: dict[int, float] = {}
        self._sent_total = 0
        self._finished = False
        self.stopped = False
        self.t = 0.0
        self.controller: SearchControl | None = None
        self._credit = 0.0

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def now(self) -> float:
        return self.t

    def _steering(self) -> bool:
        return not self.stopped and not self.schedule.finished

    def search_rate(self, rps: float) -> None:
        self.schedule.rate = rps

    def end_schedule(self) -> None:
        self.schedule.finished = True

    async def serve(self) -> None:
        while not self.schedule.finished:
            await asyncio.sleep(0)
            self.t += self.TICK
            self._credit += self.schedule.rate * self.TICK
            while self._credit >= 1:
                self._credit -= 1
                self._sent_total += 1
                self._end(self._sent_total, self.t, 0.1 if self.schedule.rate <= self.true_max else 1.0)

    def _end(self, request_id: int, sent: float, ttft: float) -> None:
        """A request sent at ``sent`` ends now, recorded to the controller, its TTFT ``ttft``."""
        assert self.controller is not None
        self.controller.on_request(
            RequestRecord(
                id=request_id,
                scheduled_at=sent,
                sent_at=sent,
                end_at=sent + ttft + 0.05,
                first_token_at=sent + ttft,
                chunk_times=[sent + ttft, sent + ttft + 0.05],
                completion_tokens=2,
            )
        )


def search_on(fake: FakeRun, monkeypatch: pytest.MonkeyPatch, hold_s: float = 2.0) -> None:
    """A search for ``ttft_p90<300ms`` (0.5 req/s, ``hold_s`` holds) driven to its end
    against ``fake``: the fake's clock runs in steps, and the controller's sleeps follow it."""
    monkeypatch.setattr(search_module, "RAMP_WINDOW_S", (0.5, 0.5))
    monkeypatch.setattr(search_control, "POLL_S", 0.0)

    async def fake_sleep(seconds: float) -> None:
        until = fake.t + seconds
        await asyncio.sleep(0)
        for _ in range(10**7):  # the fake's clock moves one tick a pass of the loop
            if fake.t >= until or fake.schedule.finished:
                return
            await asyncio.sleep(0)

    monkeypatch.setattr(search_control, "asyncio", SimpleNamespace(sleep=fake_sleep))
    plan = SearchPlan(
        SearchPlan.from_flags("ttft_p90<300ms").slo, tolerance=search_module.Tolerance(0.5), hold_s=hold_s, settle_s=0.2
    )
    controller = SearchControl(fake, plan)
    fake.controller = controller

    async def main() -> None:
        server = asyncio.ensure_future(fake.serve())
        await asyncio.wait_for(controller.drive(), timeout=60)
        await server

    asyncio.run(main())


@pytest.mark.parametrize("true_max", [3.3, 9.0, 14.2])
def test_the_controller_finds_the_max_and_ends_the_schedule(monkeypatch, true_max):
    fake = FakeRun(true_max)
    search_on(fake, monkeypatch)
    kinds = [e.data["search"] for e in fake.events]
    assert kinds[0] == "start" and "bracket" in kinds and kinds[-1] == "result"
    result = fake.events[-1].data["result"]
    assert result["failure"] is None and fake.schedule.finished
    assert result["max"] <= true_max < result["next_step_up"] <= result["max"] + 0.5 + 1e-9
    assert all(math.isclose(h["seconds"], 2.0, abs_tol=0.05) for h in result["holds"])
    assert result["line"].startswith(f"max {result['max']:.3g} req/s")


class QueueingRun(FakeRun):
    """A server that serves ``true_max`` requests a second: beyond that what is sent waits
    in its queue (in flight, unrecorded) and ends in turn, its TTFT the wait; the run's knee
    detector says so once the rate has been above it for ``KNEE_AFTER`` s (the event names
    its onset)."""

    KNEE_AFTER = 0.6

    def __init__(self, true_max: float) -> None:
        super().__init__(true_max)
        self.rates_set: list[float] = []
        self.queued: list[tuple[int, float]] = []  # (id, sent), oldest first
        self.above_since: float | None = None
        self.knee_told = False
        self.rates_before_knee: list[float] = []
        self._served = 0.0

    def search_rate(self, rps: float) -> None:
        self.rates_set.append(rps)
        super().search_rate(rps)

    async def serve(self) -> None:
        assert self.controller is not None
        while not self.schedule.finished:
            await asyncio.sleep(0)
            self.t += self.TICK
            over = self.schedule.rate > self.true_max
            if over and self.above_since is None:
                self.above_since = self.t
            if over and not self.knee_told and self.t - self.above_since >= self.KNEE_AFTER:
                self.knee_told = True
                self.rates_before_knee = list(self.rates_set)
                self.controller.on_event(Event(self.t, "knee", "knee", {"onset_t": self.above_since}))
            self._served = min(self._served + self.true_max * self.TICK, 1.0 + self.true_max * self.TICK)
            while self.queued and self._served >= 1:  # the queue, served in turn
                self._served -= 1
                request_id, sent = self.queued.pop(0)
                del self._sending[request_id]
                self._end(request_id, sent, self.t - sent + 0.1)
            self._credit += self.schedule.rate * self.TICK
            while self._credit >= 1:
                self._credit -= 1
                self._sent_total += 1
                if over or self.queued:
                    self.queued.append((self._sent_total, self.t))
                    self._sending[self._sent_total] = self.t
                else:
                    self._served = max(0.0, self._served - 1)
                    self._end(self._sent_total, self.t, 0.1)


@pytest.mark.parametrize("true_max", [4.2, 9.0])
def test_the_ramp_stops_at_the_knee_and_the_search_still_finds_the_max(monkeypatch, true_max):
    # Without the knee the ramp would walk on to 20 req/s: the windows past the max never
    # end while the rate stays above it, so none of them can break the SLO in time.
    fake = QueueingRun(true_max)
    search_on(fake, monkeypatch, hold_s=10.0)  # long enough for a queue above the max to show
    steps = [e.data for e in fake.events if e.kind == "search"]
    knee = next(d for d in steps if d["search"] == "knee")
    bracket = next(d for d in steps if d["search"] == "bracket")
    # the ramp went at most a step past the max before the knee (the detector's delay), and
    # stepped back at it: the next rate set is the pass below the knee, not a step up to 20
    assert max(fake.rates_before_knee) < true_max + 2 * 0.95 + 1e-9 < 20
    after = fake.rates_set[len(fake.rates_before_knee)]
    assert after == bracket["lo"] <= true_max
    assert true_max < knee["level"] <= true_max + 0.95 + 1e-9  # the step in force at the onset
    assert bracket["hi"] == knee["level"] and bracket["lo"] <= true_max
    result = steps[-1]["result"]
    assert result["failure"] is None
    # above the max the queue grows by (level - max) a second: a 10 s hold breaks a 300 ms
    # p90 from about max + 0.3 up
    assert result["max"] <= true_max + 0.35 < result["next_step_up"] + 0.35 <= result["max"] + 0.85 + 1e-9
    # a hold after one above the max drains first: nothing sent (rate 0) until its queue ended
    assert any(d["search"] == "drain" for d in steps)
    for i, d in enumerate(steps):
        if d["search"] == "hold" and i and steps[i - 1]["search"] == "drain":
            assert d["level"] in fake.rates_set
    assert 0.0 in fake.rates_set[fake.rates_set.index(knee["level"]) :]
    # a window with nothing sent in it (1.95 req/s for 0.5 s) is no evidence: not a break
    assert "ramp at 1.95 req/s: no figures; no request was sent in it: not judged" in [e.message for e in fake.events]


def test_a_hands_steering_does_nothing_during_a_search_and_says_so_once():
    """review rv-attack29b: `+` during a hold moved the rate, and the hold was judged (and
    reported) at the level it was not held at."""
    from rampwatch.core.timeline import NullSink
    from rampwatch.loadgen.run.options import RunOptions
    from rampwatch.loadgen.run.runner import Run
    from rampwatch.loadgen.workload.scenario import load_scenario

    class Events(NullSink):
        def __init__(self) -> None:
            self.events: list[Event] = []

        def on_event(self, event: Event) -> None:
            self.events.append(event)

    scn = load_scenario("random", overrides=[("schedule", "{}"), *[(f"schedule.{k}", str(v)) for k, v in RAMP.items()]])
    sink = Events()
    options = RunOptions(target="http://127.0.0.1:9", model="tiny", search=SearchPlan.from_flags("ttft_p99<500ms"))
    run = Run(scn, options, sinks=[sink])
    run.now = lambda: 1.0  # type: ignore[method-assign]
    before = run.schedule.current_rate(1.0)
    run.set_rate(50.0)
    run.step_rate(5.0)
    run.hold()
    run.resume()
    assert run.schedule.current_rate(1.0) == before
    assert [e.message for e in sink.events] == ["rate keys do nothing during a search: it sets the rate itself"]
    run.search_rate(7.0)  # the search's own
    assert run.schedule.current_rate(1.0) == 7.0


def test_a_ramp_of_days_is_walked_in_at_most_max_ramp_steps_windows(monkeypatch):
    """review rv-attack29b: --duration 1e12 built a staircase of 1e11 levels (23 GB)."""
    fake = FakeRun(5.0)
    fake.schedule.spec = {**RAMP, "duration_s": 1e12}
    controller = SearchControl(fake, SearchPlan.from_flags("ttft_p90<300ms"))
    fake.controller = controller
    seen: list[float] = []

    async def one_window(seconds: float) -> None:  # the first window's sleep ends the test
        seen.append(seconds)
        fake.stopped = True

    monkeypatch.setattr(search_control, "asyncio", SimpleNamespace(sleep=one_window))
    asyncio.run(controller.drive())
    assert seen == [1e12 / search_control.MAX_RAMP_STEPS]
    assert fake.events[-1].data["search"] == "result"  # a stopped search still records its result
    assert fake.events[-1].data["result"]["line"].startswith("search: not finished under SLO ttft_p90<300ms")


@pytest.mark.parametrize(("offered", "expected"), [(3.2, 3.2), (9.0, 4.8), (None, 4.8)])
def test_the_knee_is_the_detectors_rate_when_it_is_below_the_step_in_force_at_its_onset(offered, expected):
    fake = FakeRun(5.0)
    controller = SearchControl(fake, SearchPlan.from_flags("ttft_p90<300ms"))
    controller._ramping = True
    controller._set_levels = [(0.0, 2.9), (2.0, 3.85), (4.0, 4.8), (6.0, 5.75)]
    data = {"onset_t": 5.0} if offered is None else {"onset_t": 5.0, "offered_rps": offered}
    controller.on_event(Event(9.0, "knee", "knee", data))
    assert controller.knee_level == expected
