"""Screen snapshots of the run states the header and the keys must tell truly: a drain
with stalled streams, a run held then resumed (the plan moved on, time left and ETA),
and a finished run whose steering keys are disabled. Regenerate with
`pytest tests/tui/test_state_snapshots.py --snapshot-update` and review the SVGs."""

import dataclasses

import pytest

from rampwatch.tui.app import make_live_app
from tests.tui.fakes import FrozenSource, SteeredFake, fake_snapshot
from tests.tui.settle import charts_settled

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

SIZES = [(80, 24), (160, 48)]


def with_summary(snapshot, **figures):
    return dataclasses.replace(snapshot, summary={**snapshot.summary, **figures})


def draining_with_stalled_streams():
    """11 s after the schedule's end, 37 requests still out, the oldest sent 52 s ago (far
    past the p99 E2E of 9 s); the others still end at ~13 a second (the fake's completed
    rate), so the drain estimate follows that pace (~00:03) rather than reading overdue
    (a drain where none ended lately: tests/tui/test_time_left.py)."""
    snapshot = fake_snapshot(131.0, state="draining")
    return with_summary(
        dataclasses.replace(snapshot, target_rps=0.0, in_flight=37, oldest_in_flight_sent_at=79.0),
        p99_e2el_ms=9000.0,
        max_concurrent_requests=52,
    )


def held_then_resumed():
    """73 s in, after a 10 s hold (40–50 s): the 2:00 plan is now 2:10."""
    snapshot = fake_snapshot(73.0)
    return with_summary(
        dataclasses.replace(snapshot, planned_duration_s=130.0), p99_e2el_ms=9000.0, max_concurrent_requests=31
    )


def finished():
    """The run's last snapshot: nothing in flight, the rate back to 0."""
    snapshot = fake_snapshot(120.0)
    return with_summary(dataclasses.replace(snapshot, target_rps=0.0, in_flight=0), max_concurrent_requests=52)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_draining_with_stalled_streams(snap_compare, size):
    app = make_live_app(FrozenSource(draining_with_stalled_streams()), SteeredFake(draining_with_stalled_streams()))
    assert snap_compare(app, terminal_size=size, run_before=charts_settled)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_hold_then_resume_eta_and_planned_duration(snap_compare, size):
    app = make_live_app(FrozenSource(held_then_resumed()), SteeredFake(held_then_resumed()))
    assert snap_compare(app, terminal_size=size, run_before=charts_settled)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_done_with_the_steering_keys_disabled(snap_compare, size):
    """The footer dims the keys that cannot act; space was pressed: the toast says why."""
    fake = SteeredFake(finished())

    async def press_space(pilot):
        await charts_settled(pilot)
        await pilot.press("space")
        await pilot.pause()

    assert snap_compare(make_live_app(fake, fake), terminal_size=size, run_before=press_space)
    assert fake.calls == []
