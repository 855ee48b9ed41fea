from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.rate_profiles import TimeProfile, time_segments
from rampwatch.loadgen.workload.schedule_spec import TRACE_KIND, VLLM_KINDS, check_schedule, resolve_schedule
from rampwatch.loadgen.workload.schedules import build_schedule

# The schedule's plan, worked out from its profile (what the tests check the send times against).


def expected_rate_curve(spec: dict[str, Any], times: Sequence[float]) -> list[float]:
    """The target rate at each time if nobody touches the controls (wall-clock kinds)."""
    spec = resolve_schedule(spec)
    assert spec["kind"] not in VLLM_KINDS + (TRACE_KIND,), "not ramped by a rate function of time"
    time_profile = TimeProfile(time_segments(spec))
    return [time_profile.rate(t) if t >= 0 else 0.0 for t in times]


def schedule_work(spec: dict[str, Any], t0: float, t1: float) -> float:
    """Expected number of arrivals between ramp times t0 and t1 (∫ rate; wall-clock kinds)."""
    spec = resolve_schedule(spec)
    assert spec["kind"] not in VLLM_KINDS + (TRACE_KIND,), "not ramped by a rate function of time"
    profile = TimeProfile(time_segments(spec))
    return profile.work(t1) - profile.work(t0)


def all_times(schedule, limit=100_000):
    out = []
    while len(out) < limit:
        t = schedule.next_send_time()
        if t is None:
            return out
        out.append(t)
    raise AssertionError("schedule did not end")


def window_counts(times, edges):
    return np.histogram(times, bins=edges)[0]


RAMPS = [
    {"kind": "linear", "start_rps": 1, "end_rps": 20, "duration_s": 120},
    {"kind": "linear", "start_rps": 0, "end_rps": 30, "duration_s": 60, "hold_s": 20},
    {"kind": "linear", "start_rps": 25, "end_rps": 2, "duration_s": 90},
    {"kind": "exponential", "start_rps": 1, "end_rps": 40, "duration_s": 100},
    {
        "kind": "steps",
        "steps": [{"rate": 5, "duration_s": 30}, {"rate": 0, "duration_s": 10}, {"rate": 30, "duration_s": 30}],
    },
    {"kind": "constant", "rate": 12, "duration_s": 50},
]


@pytest.mark.parametrize("spec", RAMPS, ids=lambda s: s["kind"])
def test_constant_gaps_follow_the_rate_curve_to_within_one_request(spec):
    """With unit gaps the k-th arrival is exactly where ∫rate reaches k, so every
    window holds ∫rate over it, give or take one request at each edge."""
    spec = {**spec, "arrival": "constant"} if spec["kind"] not in ("constant",) else spec
    sched = build_schedule(spec, seed=1)
    times = all_times(sched)
    end = sched.planned_duration_s
    edges = np.linspace(0, end, 11)
    counts = window_counts(times, edges)
    for (a, b), n in zip(zip(edges[:-1], edges[1:]), counts):
        assert abs(n - schedule_work(spec, a, b)) <= 2
    assert abs(len(times) - schedule_work(spec, 0, end)) <= 1
    assert times == sorted(times) and times[-1] <= end + 1e-9


@pytest.mark.parametrize("spec", RAMPS[:5], ids=lambda s: s["kind"])
def test_poisson_window_counts_match_the_integral(spec):
    sched = build_schedule({**spec, "arrival": "poisson"}, seed=7)
    times = all_times(sched)
    edges = np.linspace(0, sched.planned_duration_s, 6)
    for (a, b), n in zip(zip(edges[:-1], edges[1:]), window_counts(times, edges)):
        expected = schedule_work(spec, a, b)
        assert abs(n - expected) <= 4.5 * math.sqrt(max(expected, 1.0)), (a, b, n, expected)


def test_poisson_counts_are_poisson_dispersed():
    sched = build_schedule({"kind": "poisson", "rate": 20, "duration_s": 400}, seed=3)
    counts = window_counts(all_times(sched), np.arange(0, 401, 1.0))
    assert counts.mean() == pytest.approx(20, rel=0.05)
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.2)


@pytest.mark.parametrize("k", [0.25, 0.5, 2.0, 8.0])
def test_gamma_gaps_have_cv_squared_one_over_burstiness(k):
    sched = build_schedule({"kind": "gamma", "rate": 10, "burstiness": k, "num_requests": 20000}, seed=5)
    gaps = np.diff([0.0] + all_times(sched))
    assert len(gaps) == 20000
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / k, rel=0.12)


def test_constant_arrivals_are_evenly_spaced_and_the_first_waits_one_gap():
    times = all_times(build_schedule({"kind": "constant", "rate": 4, "duration_s": 2}, seed=0))
    assert times == pytest.approx([0.25 * i for i in range(1, 9)])


def test_seeded_and_deterministic():
    spec = {"kind": "linear", "start_rps": 1, "end_rps": 10, "duration_s": 30}
    a = all_times(build_schedule(spec, seed=11))
    assert a == all_times(build_schedule(spec, seed=11))
    assert a != all_times(build_schedule(spec, seed=12))


def test_expected_rate_curve():
    spec = {"kind": "linear", "start_rps": 2, "end_rps": 12, "duration_s": 100, "hold_s": 10}
    assert expected_rate_curve(spec, [0, 50, 100, 105, 110, 200]) == pytest.approx([2, 7, 12, 12, 0, 0])
    exp = {"kind": "exponential", "start_rps": 1, "end_rps": 16, "duration_s": 40}
    assert expected_rate_curve(exp, [0, 10, 20, 30]) == pytest.approx([1, 2, 4, 8])
    steps = {"kind": "steps", "steps": [{"rate": 3, "duration_s": 5}, {"rate": 9, "duration_s": 5}]}
    assert expected_rate_curve(steps, [0, 4.9, 5, 9.9, 10]) == pytest.approx([3, 3, 9, 9, 0])


def drain_until(schedule, t_stop):
    """Fire arrivals up to t_stop like the runner; returns them and the first one after."""
    fired = []
    while True:
        t = schedule.next_send_time()
        if t is None or t > t_stop:
            return fired, t
        fired.append(t)


def test_hold_freezes_the_rate_and_resume_continues_shifted_by_the_hold():
    spec = {"kind": "linear", "start_rps": 0, "end_rps": 10, "duration_s": 100, "arrival": "constant"}
    s = build_schedule(spec, seed=0)
    before, pending = drain_until(s, 50.0)
    assert s.current_rate(50.0) == pytest.approx(5.0)
    event = s.hold(50.0)
    assert (event.kind, s.state) == ("hold", "holding")
    assert event.data == {"before_rps": pytest.approx(5.0), "after_rps": pytest.approx(5.0)}
    during, pending = drain_until(s, 80.0)  # the withdrawn pending arrival is re-timed first
    assert np.diff(during) == pytest.approx(np.full(len(during) - 1, 0.2))
    assert len(during) == pytest.approx(150, abs=1)
    assert s.current_rate(79.0) == pytest.approx(5.0)
    event = s.resume(80.0)
    assert (event.kind, s.state) == ("resume", "ramping")
    assert event.data["after_rps"] == pytest.approx(5.0)
    assert s.current_rate(90.0) == pytest.approx(6.0)  # ramp time 60 s at wall time 90 s
    assert s.projected_end_s() == pytest.approx(130.0)
    after, _ = drain_until(s, 1e9)
    assert len(before) + len(during) + len(after) == pytest.approx(500 + 150, abs=2)
    assert max(after) <= 130.0 + 1e-9
    assert s.state == "done" and s.current_rate(131.0) == 0.0


def test_set_rate_applies_to_the_pending_arrival_at_once():
    s = build_schedule({"kind": "constant", "rate": 1, "duration_s": 100}, seed=0)
    assert s.next_send_time() == pytest.approx(1.0)
    assert s.next_send_time() == pytest.approx(2.0)  # handed out, not yet sent
    event = s.set_rate(1.5, 10.0)
    assert event.kind == "set_rate" and event.data == {"before_rps": 1.0, "after_rps": 10.0}
    # Half of the unit gap remained at 1.5 s; at 10 req/s it takes 0.05 s.
    assert s.next_send_time() == pytest.approx(1.55)
    assert s.next_send_time() == pytest.approx(1.65)
    event = s.step_rate(1.6, -6.0)
    assert event.data["after_rps"] == pytest.approx(4.0) and event.data["delta_rps"] == -6.0
    assert s.next_send_time() == pytest.approx(1.6 + 0.05 * 10 / 4)
    assert s.state == "holding"


def test_rate_zero_pauses_until_the_next_change():
    s = build_schedule({"kind": "poisson", "rate": 5, "duration_s": 60}, seed=2)
    first = s.next_send_time()
    s.set_rate(first, 0.0)
    assert s.next_send_time() == math.inf
    s.set_rate(first + 10, 5.0)
    nxt = s.next_send_time()
    assert first + 10 <= nxt < math.inf


def test_num_requests_ends_the_schedule():
    s = build_schedule({"kind": "poisson", "rate": 50, "num_requests": 7}, seed=0)
    assert s.planned_duration_s is None
    assert len(all_times(s)) == 7 and s.state == "done"
    assert s.hold(1.0).message == "schedule already finished"


def test_control_calls_report_noops():
    s = build_schedule({"kind": "poisson", "rate": 5}, seed=0)
    assert s.resume(0.5).message == "not holding"
    s.hold(1.0)
    assert s.hold(2.0).message.startswith("already holding")
    with pytest.raises(UserError):
        s.set_rate(2.0, -1)


# ---------------------------------------------------------------- vllm bench ramp-up


def vllm_reference_rate(strategy, start, end, i, n):
    """vllm/benchmarks/serve.py _get_current_request_rate, restated."""
    progress = i / max(n - 1, 1)
    if strategy == "linear":
        return start + (end - start) * progress
    return start * (end / start) ** progress


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_vllm_ramp_rates_follow_the_request_index(strategy):
    n = 300
    spec = {"kind": f"vllm-{strategy}", "start_rps": 2, "end_rps": 30, "num_requests": n}
    s = build_schedule(spec, seed=0)
    expected = [vllm_reference_rate(strategy, 2, 30, i, n) for i in range(n)]
    assert s.request_rates == expected
    times = all_times(s)
    assert len(times) == n and s.planned_duration_s == times[-1]
    # The rate in force during the gap before request i is request i's rate.
    fresh = build_schedule(spec, seed=0)
    midpoints = (np.array([0.0] + times[:-1]) + np.array(times)) / 2
    assert [fresh.current_rate(t) for t in midpoints] == pytest.approx(expected)


def test_vllm_linear_draws_the_same_gaps_as_vllm_bench():
    """vllm bench seeds numpy's global generator and draws, per request,
    gamma(shape=burstiness, scale=1/(rate*burstiness)); the first request waits its gap."""
    n, k, seed = 200, 0.7, 42
    s = build_schedule({"kind": "vllm-linear", "start_rps": 1, "end_rps": 9, "num_requests": n, "burstiness": k}, seed)
    np.random.seed(seed)
    delays = [np.random.gamma(shape=k, scale=1.0 / (vllm_reference_rate("linear", 1, 9, i, n) * k)) for i in range(n)]
    for i in range(1, n):
        delays[i] += delays[i - 1]
    times = all_times(s)
    assert times[0] > 0
    assert times == delays


def test_vllm_gaps_have_the_gamma_distribution():
    n, k = 20000, 2.0
    s = build_schedule({"kind": "vllm-linear", "start_rps": 1, "end_rps": 50, "num_requests": n, "burstiness": k}, 9)
    gaps = np.diff([0.0] + all_times(s))
    unit = gaps * np.array(s.request_rates)  # Gamma(k, 1/k) if the gaps are drawn right
    assert unit.mean() == pytest.approx(1.0, rel=0.03)
    assert unit.var() == pytest.approx(1 / k, rel=0.1)


def test_vllm_constant_rescales_to_n_over_rate():
    s = build_schedule({"kind": "vllm-constant", "rate": 8, "num_requests": 400}, seed=1)
    times = all_times(s)
    assert times[-1] == pytest.approx(400 / 8, rel=1e-12)


def test_vllm_hold_adds_requests_and_resume_finishes_the_ramp():
    n = 100
    # Near-constant gaps (large burstiness) make the counts exact to within an edge.
    spec = {"kind": "vllm-linear", "start_rps": 1, "end_rps": 10, "num_requests": n, "burstiness": 1e6}
    s = build_schedule(spec, seed=3)
    fired, _ = drain_until(s, 5.0)
    rate = s.current_rate(5.0)
    s.hold(5.0)
    held, _ = drain_until(s, 25.0)
    assert len(held) == pytest.approx(20 * rate, abs=1.5)
    s.resume(25.0)
    rest, _ = drain_until(s, 1e9)
    assert len(fired) + len(rest) == pytest.approx(n, abs=1.5)
    assert rest[-1] - rest[-2] == pytest.approx(1 / 10, rel=0.05)  # the ramp reached its end rate


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"kind": "vllm-linear", "start_rps": 0, "end_rps": 5, "num_requests": 10},
            "start_rps: expected a number > 0, got 0",
        ),
        (
            {"kind": "vllm-linear", "start_rps": 8, "end_rps": 5, "num_requests": 10},
            "end_rps: expected a number >= start_rps (8)",
        ),
        (
            {"kind": "linear", "start_rps": 1, "end_rps": "fast", "duration_s": 10},
            "end_rps: expected a number >= 0, got 'fast'",
        ),
        (
            {"kind": "linear", "start_rps": 1, "end_rsp": 3, "duration_s": 10},
            "end_rsp: unknown key; did you mean 'end_rps'?",
        ),
        ({"kind": "ramp"}, "kind: expected one of constant, poisson"),
        (
            {"kind": "exponential", "start_rps": 0, "end_rps": 5, "duration_s": 10},
            "start_rps: expected a number > 0, got 0",
        ),
    ],
)
def test_bad_specs(spec, message):
    _, problems = check_schedule(spec)
    assert any(message in ".".join(map(str, p.path)) + ": " + p.message for p in problems), problems
    with pytest.raises(UserError, match="^schedule\\."):
        build_schedule(spec, 0)
