"""A session workload's target is shown as users (closed loop, schedule kind users) or
sessions per second (open loop), not as a request rate."""

from __future__ import annotations

import dataclasses

from rampwatch.app.session import progress_line
from rampwatch.loadgen.workload.sessions import session_target, users_target
from rampwatch.tui.chart_data import schedule_text
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.fakes import fake_snapshot

USERS = {"kind": "users", "start_users": 2, "end_users": 8, "duration_s": 60}


def closed_loop_snapshot():
    snap = fake_snapshot(30)
    header = dataclasses.replace(snap.header, scenario={**snap.header.scenario, "schedule": USERS})
    return dataclasses.replace(snap, header=header, target_rps=4.6)


def open_loop_sessions_snapshot():
    snap = fake_snapshot(30)
    workload = {**snap.header.scenario.get("workload", {}), "sessions": {"turns": {"dist": "fixed", "value": 3}}}
    header = dataclasses.replace(snap.header, scenario={**snap.header.scenario, "workload": workload})
    return dataclasses.replace(snap, header=header, target_rps=2.5)


def test_the_stats_and_progress_line_say_users_for_a_closed_loop():
    snap = closed_loop_snapshot()
    assert users_target(snap.header) and not users_target(fake_snapshot(30).header)
    now, _ = StatsPanel().rows(snap)
    assert now[0] == ("target users", "5")
    assert " target   5 users | " in progress_line(snap)
    assert " rps | " in progress_line(fake_snapshot(30))


def test_a_users_schedule_in_one_line():
    assert schedule_text(USERS) == "users 2 → 8 over 60 s"
    assert schedule_text({"kind": "users", "users": 4, "duration_s": 30}) == "4 users over 30 s"


def test_an_open_loop_session_workload_says_sessions_per_second():
    snap = open_loop_sessions_snapshot()
    assert session_target(snap.header) and not users_target(snap.header)
    assert not session_target(closed_loop_snapshot().header)
    now, _ = StatsPanel().rows(snap)
    assert now[0] == ("target sessions/s", "2.50")
    assert " target   2.5 sessions/s | " in progress_line(snap)
