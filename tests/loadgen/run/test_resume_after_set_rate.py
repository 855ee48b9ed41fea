"""Resuming after a rate set by hand (``+``/``-`` on hold): a ramp goes on from the
rate the user set; otherwise the event says what rate the schedule resumes at and
that the rate set by hand ends, and why."""

from __future__ import annotations

import pytest

from rampwatch.loadgen.workload.schedules import build_schedule

LINEAR = {"kind": "linear", "start_rps": 1, "end_rps": 10, "duration_s": 90}  # +0.1 req/s each second
EXPONENTIAL = {"kind": "exponential", "start_rps": 1, "end_rps": 16, "duration_s": 80}  # ×2 every 20 s
STEPS = {"kind": "steps", "steps": [{"rate": 2, "duration_s": 30}, {"rate": 5, "duration_s": 30}]}
CONSTANT = {"kind": "constant", "rate": 4, "duration_s": 60}


@pytest.mark.parametrize(
    "spec, hold_at, set_to, resume_at, rate_after, rate_10s_later, planned_end, says",
    [
        # held at 7.4 req/s (64 s in), raised to 8.4: the ramp goes on from 8.4, 10 s ahead
        (LINEAR, 64.0, 8.4, 70.0, 8.4, 9.4, 90.0 - 10.0 + 6.0, "the ramp goes on from where it reaches 8.4"),
        # lowered to 5.4: the ramp goes back 20 s and climbs again from there
        (LINEAR, 64.0, 5.4, 70.0, 5.4, 6.4, 90.0 + 20.0 + 6.0, "the ramp goes on from where it reaches 5.4"),
        # held at 4 (40 s in), set to 8: the exponential ramp goes on from 8 (60 s in)
        (EXPONENTIAL, 40.0, 8.0, 45.0, 8.0, 8.0 * 2**0.5, 80.0 - 20.0 + 5.0, "where it reaches 8"),
        # set past the ramp's end: it resumes where it was held, and says why
        (LINEAR, 64.0, 12.0, 70.0, 7.4, 8.4, 90.0 + 6.0, "outside the ramp's 1–10 req/s"),
        # no ramp to go on from: the plan resumes, and the rate set by hand is said to end
        (STEPS, 40.0, 9.0, 50.0, 5.0, 5.0, 70.0, "the rate set by hand, 9, ends (a steps schedule"),
        (CONSTANT, 20.0, 6.0, 30.0, 4.0, 4.0, 70.0, "the rate set by hand, 6, ends (a constant schedule"),
    ],
)
def test_resume_after_a_rate_set_by_hand(
    spec, hold_at, set_to, resume_at, rate_after, rate_10s_later, planned_end, says
):
    schedule = build_schedule(spec, seed=1)
    schedule.hold(hold_at)
    schedule.set_rate(hold_at + 2.0, set_to)
    event = schedule.resume(resume_at)
    assert event.kind == "resume" and event.data.get("applied", True)
    assert says in event.message
    assert event.data["set_rps"] == pytest.approx(set_to)
    assert event.data["after_rps"] == pytest.approx(rate_after)
    assert schedule.current_rate(resume_at) == pytest.approx(rate_after)
    assert schedule.current_rate(resume_at + 10.0) == pytest.approx(rate_10s_later)
    assert schedule.planned_end_s(resume_at) == pytest.approx(planned_end)


def test_a_plain_hold_resumes_where_it_was_held():
    schedule = build_schedule(LINEAR, seed=1)
    schedule.hold(64.0)
    event = schedule.resume(70.0)
    assert event.message == "resume ramp at 7.4 req/s" and "set_rps" not in event.data
    assert schedule.current_rate(70.0) == pytest.approx(7.4)


def test_setting_the_rate_back_to_the_held_rate_is_a_plain_resume():
    schedule = build_schedule(LINEAR, seed=1)
    schedule.hold(64.0)
    schedule.step_rate(65.0, 1.0)
    schedule.step_rate(66.0, -1.0)
    event = schedule.resume(70.0)
    assert event.message == "resume ramp at 7.4 req/s"


def test_send_times_follow_the_resumed_ramp():
    """After resuming from 8.4 req/s, the gaps between sends are those of the ramp there."""
    schedule = build_schedule({**LINEAR, "arrival": "constant"}, seed=1)

    def sends_until(end: float) -> None:  # as the runner: sends up to ``end``, the next one pending
        while (t := schedule.next_send_time()) is not None and t < end:
            pass

    sends_until(64.0)
    schedule.hold(64.0)
    schedule.set_rate(64.0, 8.4)
    sends_until(70.0)
    schedule.resume(70.0)
    times = [schedule.next_send_time() for _ in range(10)]
    assert times[0] == pytest.approx(70.0, abs=1 / 8.4)
    rates = [1 / (b - a) for a, b in zip(times, times[1:], strict=False)]
    assert rates[0] == pytest.approx(8.4, rel=0.02) and rates[-1] == pytest.approx(8.5, rel=0.02)
