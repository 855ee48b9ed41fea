"""Time left, ETA and the drain estimate the header shows (pure functions)."""

import dataclasses
import math

import pytest

from rampwatch.core.timeline import Event
from rampwatch.tui.chart_data import TimeLeft, eta_unix, oldest_in_flight_age_s, time_left
from rampwatch.tui.header_bar import HeaderBar
from tests.tui.fakes import fake_snapshot


def snap(
    t: float,
    state: str,
    *,
    planned=120.0,
    e2e_ms=None,
    events=(),
    in_flight=5,
    oldest=None,
    grace=None,
    ended_rps=0.0,
    options=None,
):
    """The fake run at ``t``, its requests ending at ``ended_rps`` a second throughout (0:
    the drain estimate goes by latency alone)."""
    base = fake_snapshot(t, state=state)
    series = {**base.series, "completed_rps": [ended_rps] * len(base.times), "error_rps": [0.0] * len(base.times)}
    summary = dict(base.summary)
    if e2e_ms is not None:
        summary["p99_e2el_ms"] = e2e_ms
    header = base.header
    if grace is not None or options is not None:
        header = dataclasses.replace(header, options={"stop_grace": grace, **(options or {})})
    return dataclasses.replace(
        base,
        series=series,
        planned_duration_s=planned,
        summary=summary,
        events=list(events),
        in_flight=in_flight,
        oldest_in_flight_sent_at=oldest,
        header=header,
    )


@pytest.mark.parametrize(
    "t, state, planned, e2e_ms, expected",
    [
        (30.0, "ramping", 120.0, 8000.0, TimeLeft(90.0, 8.0)),
        (30.0, "ramping", 120.0, None, TimeLeft(90.0, None)),
        (73.0, "holding", 130.0, 2000.0, TimeLeft(57.0, 2.0)),  # the plan moved on by a 10 s hold
        (30.0, "ramping", None, 8000.0, TimeLeft(None, 8.0)),  # unbounded schedule
        (125.0, "draining", 120.0, 8000.0, TimeLeft(0.0, 3.0)),  # 5 s into the drain
        (131.0, "draining", 120.0, 8000.0, TimeLeft(0.0, 0.0)),  # stalled: overdue
        (125.0, "draining", 120.0, math.nan, TimeLeft(0.0, None)),
    ],
)
def test_time_left(t, state, planned, e2e_ms, expected):
    assert time_left(snap(t, state, planned=planned, e2e_ms=e2e_ms)) == expected


def test_no_drain_estimate_before_a_request_has_completed():
    s = snap(125.0, "draining", e2e_ms=0.0)
    s = dataclasses.replace(s, summary={**s.summary, "completed": 0})
    assert time_left(s) == TimeLeft(0.0, None)  # not "overdue"
    line = header_line(s)
    assert "drain unknown" in line and "ETA" not in line  # neither "overdue" nor an ETA of "now"


@pytest.mark.parametrize(
    "t, state, in_flight, ended_rps, expected_drain",
    [
        # 886 in flight, ending at 5 a second: three minutes, not "p99 E2E 20 s less 10 s drained"
        (130.0, "draining", 886, 5.0, 886 / 5.0),
        (60.0, "ramping", 300, 6.0, 50.0),  # before the drain: what is out now, at the pace it ends
        (130.0, "draining", 12, 6.0, 10.0),  # few left: the last one still needs its latency
        (130.0, "draining", 886, 0.0, 10.0),  # none ended lately: the latency alone
        # a handful ended lately (4 in 10 s): their pace would read 50 s, then 100 s at 2;
        # the latency alone, which does not swing with each request that ends
        (130.0, "draining", 20, 0.4, 10.0),
        (130.0, "draining", 20, 1.0, 20.0),  # 10 ended: a pace to go by
    ],
)
def test_the_drain_follows_the_rate_requests_end_at(t, state, in_flight, ended_rps, expected_drain):
    left = time_left(snap(t, state, e2e_ms=20000.0, in_flight=in_flight, ended_rps=ended_rps))
    assert left is not None and left.drain_s == pytest.approx(expected_drain)


@pytest.mark.parametrize(
    "drain, t, state, expected_drain",
    [
        ("cap:30", 60.0, "ramping", 30.0),  # 886 / 5 s would be 177 s: the cap cancels at 30
        ("cap:30", 130.0, "draining", 20.0),  # 10 s into the drain
        ("cancel", 60.0, "ramping", 0.0),
        ("wait", 130.0, "draining", 886 / 5.0),
    ],
)
def test_the_drain_policy_bounds_the_estimate(drain, t, state, expected_drain):
    left = time_left(snap(t, state, e2e_ms=20000.0, in_flight=886, ended_rps=5.0, options={"drain": drain}))
    assert left is not None and left.drain_s == pytest.approx(expected_drain)


def test_nothing_left_once_done():
    assert time_left(snap(120.0, "done")) is None


@pytest.mark.parametrize(
    "events, grace, expected_drain",
    [
        ([Event(60.0, "stop", "stop requested", {"grace_s": 10.0})], None, 8.0),  # e2e 30 s, grace ends at 70
        ([Event(60.0, "stop", "stop requested", {"grace_s": 10.0})], 99.0, 8.0),  # the event's grace wins
        ([Event(60.0, "stop", "stop requested")], 4.0, 2.0),  # older recordings: the run's option
        ([Event(60.0, "stop", "stop requested", {"grace_s": 60.0})], None, 28.0),  # the e2e estimate is shorter
    ],
)
def test_a_stop_bounds_the_drain_by_its_grace_period(events, grace, expected_drain):
    left = time_left(snap(62.0, "stopping", planned=120.0, e2e_ms=30000.0, events=events, grace=grace))
    assert left == TimeLeft(0.0, expected_drain)


@pytest.mark.parametrize("drain", ["cancel", "cap:1"])
def test_a_stop_that_cut_the_schedule_short_gets_its_grace_whatever_the_drain_policy(drain):
    stop = Event(60.0, "stop", "stop requested", {"grace_s": 10.0})
    left = time_left(snap(62.0, "stopping", planned=120.0, e2e_ms=30000.0, events=[stop], options={"drain": drain}))
    assert left == TimeLeft(0.0, 8.0)  # the grace's 8 s left, not the policy's 0 (or 1 s from the stop)


def test_eta_is_the_start_plus_elapsed_plus_what_is_left():
    s = snap(30.0, "ramping", e2e_ms=8000.0)
    assert eta_unix(s, time_left(s)) == s.header.started_at_unix + 30.0 + 90.0 + 8.0


def test_oldest_in_flight_age():
    assert oldest_in_flight_age_s(snap(131.0, "draining", oldest=79.0)) == 52.0
    assert oldest_in_flight_age_s(snap(131.0, "draining", oldest=None)) is None
    assert oldest_in_flight_age_s(snap(131.0, "draining", oldest=79.0, in_flight=0)) is None


def header_line(snapshot, mode="live") -> str:
    return HeaderBar(mode=mode).render_text(snapshot).plain.split("\n")[0]


def test_header_while_held_shows_the_moved_plan_time_left_and_eta():
    line = header_line(snap(73.0, "holding", planned=130.0, e2e_ms=9000.0))
    # 1_700_000_000 (22:13:20 UTC) + 139 s, the drain's 9 s included and said so
    assert "01:13 / 02:10  left 00:57  ETA 22:15:39 incl. ~00:09 drain  target" in line


def test_header_while_draining_shows_in_flight_the_oldest_and_the_key():
    line = header_line(snap(131.0, "draining", e2e_ms=9000.0, in_flight=37, oldest=79.0))
    assert line.startswith(" rampwatch  DRAINING ")  # then the health label (the fake run has errors)
    assert "02:11 / 02:00  drain overdue  ETA 22:15:31  in flight 37  oldest 00:52  x cancels them now" in line
    replayed = header_line(snap(131.0, "draining", e2e_ms=9000.0, in_flight=37, oldest=79.0), mode="replay")
    assert "in flight 37  oldest 00:52" in replayed and "x cancels" not in replayed  # no key in a replay


def test_header_shows_the_peak_in_flight():
    s = snap(60.0, "ramping")
    s = dataclasses.replace(s, summary={**s.summary, "max_concurrent_requests": 48})
    assert "in flight 5 (peak 48)" in header_line(s)


def test_header_names_a_drain_policy_that_cancels_before_the_run_starts():
    def line2(options):
        s = snap(0.0, "starting", options=options)
        return HeaderBar(mode="live").render_text(s).plain.split("\n")[1]

    assert line2({"drain": "cap:30"}).endswith("drain cap:30")
    assert line2({"drain": "cancel"}).endswith("drain cancel")
    assert "drain" not in line2({"drain": "wait"})  # vllm bench's way: said only otherwise


def test_a_drain_of_under_a_second_reads_as_one_not_zero():
    line = header_line(snap(131.0, "draining", e2e_ms=9000.0, in_flight=2, ended_rps=20.0))
    assert "drain ~00:01  ETA" in line and "in flight 2" in line
