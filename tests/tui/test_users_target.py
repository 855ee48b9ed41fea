"""A closed loop (schedule kind users): its target is shown as users, not a rate."""

from __future__ import annotations

import dataclasses

from rampwatch.app.session import progress_line
from rampwatch.loadgen.sessions import users_target
from rampwatch.tui.chart_data import schedule_text
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.fakes import fake_snapshot

USERS = {"kind": "users", "start_users": 2, "end_users": 8, "duration_s": 60}


def closed_loop_snapshot():
    snap = fake_snapshot(30)
    header = dataclasses.replace(snap.header, scenario={**snap.header.scenario, "schedule": USERS})
    return dataclasses.replace(snap, header=header, target_rps=4.6)


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
