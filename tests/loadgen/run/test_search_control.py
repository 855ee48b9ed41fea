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
        self.oldest_sent_at = None
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

    def set_rate(self, rps: float) -> None:
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
                ttft = 0.1 if self.schedule.rate <= self.true_max else 1.0
                self._sent_total += 1
                sent = self.t
                record = RequestRecord(
                    id=self._sent_total,
                    scheduled_at=sent,
                    sent_at=sent,
                    end_at=sent + ttft + 0.05,
                    first_token_at=sent + ttft,
                    chunk_times=[sent + ttft, sent + ttft + 0.05],
                    completion_tokens=2,
                )
                assert self.controller is not None
                self.controller.on_request(record)


def search_on(fake: FakeRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search for ``ttft_p90<300ms`` (0.5 req/s, 2 s holds) driven to its end against
    ``fake``: the fake's clock runs in steps, and the controller's sleeps follow it."""
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
        SearchPlan.from_flags("ttft_p90<300ms").slo, tolerance=search_module.Tolerance(0.5), hold_s=2.0, settle_s=0.2
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
    """Above ``true_max`` the server stops keeping up: what is sent then waits (in flight,
    unrecorded) until the rate is back at or below it, and the run's knee detector says so
    once the rate has been above it for ``KNEE_AFTER`` s (the event names its onset)."""

    KNEE_AFTER = 0.6

    def __init__(self, true_max: float) -> None:
        super().__init__(true_max)
        self.rates_set: list[float] = []
        self.queued: list[float] = []
        self.above_since: float | None = None
        self.knee_told = False

    def set_rate(self, rps: float) -> None:
        self.rates_set.append(rps)
        super().set_rate(rps)

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
                self.controller.on_event(Event(self.t, "knee", "knee", {"onset_t": self.above_since}))
            if not over:
                for i, sent in enumerate(self.queued):  # the queue drains: each waited
                    self._end(-(i + 1), sent, self.t - sent)
                    del self._sending[-(i + 1)]
                self.queued = []
            self._credit += self.schedule.rate * self.TICK
            while self._credit >= 1:
                self._credit -= 1
                self._sent_total += 1
                if over:
                    self.queued.append(self.t)
                    self._sending[-len(self.queued)] = self.t
                else:
                    self._end(self._sent_total, self.t, 0.1)

    def _end(self, request_id: int, sent: float, ttft: float) -> None:
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
            )  # fmt: skip
        )


@pytest.mark.parametrize("true_max", [4.2, 9.0])
def test_the_ramp_stops_at_the_knee_and_the_search_still_finds_the_max(monkeypatch, true_max):
    # Without the knee the ramp would walk on to 20 req/s: the windows past the max never
    # end while the rate stays above it, so none of them can break the SLO in time.
    fake = QueueingRun(true_max)
    search_on(fake, monkeypatch)
    steps = [e.data for e in fake.events if e.kind == "search"]
    knee = next(d for d in steps if d["search"] == "knee")
    bracket = next(d for d in steps if d["search"] == "bracket")
    ramp_rates = fake.rates_set[: fake.rates_set.index(max(fake.rates_set)) + 1]
    # the ramp went at most a step or two past the max (the detector's delay), not to 20
    assert max(ramp_rates) < true_max + 2 * 0.95 + 1e-9 < 20
    assert true_max < knee["level"] <= true_max + 0.95 + 1e-9  # the step in force at the onset
    assert bracket["hi"] == knee["level"] and bracket["lo"] <= true_max
    result = steps[-1]["result"]
    assert result["failure"] is None
    assert result["max"] <= true_max < result["next_step_up"] <= result["max"] + 0.5 + 1e-9
    # a hold after one above the max drains first: nothing sent (rate 0) until its queue ended
    assert any(d["search"] == "drain" for d in steps)
    for i, d in enumerate(steps):
        if d["search"] == "hold" and i and steps[i - 1]["search"] == "drain":
            assert d["level"] in fake.rates_set
    assert 0.0 in fake.rates_set[fake.rates_set.index(knee["level"]) :]
    # a window with nothing sent in it (1.95 req/s for 0.5 s) is no evidence: not a break
    assert "ramp at 1.95 req/s: no figures; no request was sent in it: not judged" in [e.message for e in fake.events]
