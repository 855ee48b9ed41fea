"""The header at every width: one meaning per label (its "target" is the Stats panel's
"target rps"), the live figures kept at 80 columns, and no live-only items in a replay."""

import dataclasses

import pytest

from rampwatch.tui.chart_data import format_rate
from rampwatch.tui.header_bar import HeaderBar
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.fakes import fake_snapshot

MANAGED = {"managed_server": {"startup_s": 0.5}}


def snap(t: float, state: str, *, in_flight: int = 34, oldest: float | None = None):
    base = fake_snapshot(t, state=state)
    header = dataclasses.replace(base.header, server_info={**base.header.server_info, **MANAGED})
    summary = {**base.summary, "p99_e2el_ms": 5000.0, "max_concurrent_requests": 48}
    return dataclasses.replace(
        base, header=header, summary=summary, in_flight=in_flight, oldest_in_flight_sent_at=oldest
    )


def shown(snapshot, width: int, mode: str = "live") -> list[str]:
    """The two lines as a terminal ``width`` cells wide shows them (the last cell of a
    cut line is its ellipsis)."""
    bar = HeaderBar(mode=mode)
    if mode == "replay":
        bar.replay_status, bar.replay_duration_s = "⏸ 1×", 123.0
    lines = bar.render_text(snapshot, width).plain.split("\n")
    return [line if len(line) <= width else line[: width - 1] for line in lines]


@pytest.mark.parametrize("width", [80, 100, 160])
@pytest.mark.parametrize(
    "state, t, must_show",
    [
        ("ramping", 60.0, ["RAMPING", "01:00 / 02:00", "left 01:00", "ETA ", "incl. ~00:05 drain", "in flight 34"]),
        ("holding", 42.0, ["HOLDING", "left ", "ETA ", "target ", "in flight 34 (peak 48)"]),
        ("draining", 123.0, ["DRAINING", "drain ~00:03", "ETA ", "in flight 34", "oldest 00:08"]),
    ],
)
def test_the_header_keeps_the_state_time_eta_drain_and_in_flight_at_every_width(state, t, must_show, width):
    lines = shown(snap(t, state, oldest=115.0 if state == "draining" else None), width)
    text = "\n".join(lines)
    for item in must_show:
        assert item in text, f"{item!r} cut at {width} columns: {lines}"


def test_a_wide_header_keeps_the_brand_and_the_identity_on_its_own_line():
    lines = shown(snap(60.0, "ramping"), 200)
    assert lines[0].startswith(" rampwatch  RAMPING ")
    assert lines[1].startswith(" scenario chat  model ") and "server http://" in lines[1]
    assert "(ready in 0.5 s)" in lines[1]


@pytest.mark.parametrize("t", [30.0, 60.0, 95.0])
def test_target_means_the_same_rate_in_the_header_and_the_stats_panel(t):
    snapshot = snap(t, "ramping")
    header = shown(snapshot, 200)[0]
    assert "offered" not in header  # the Stats panel's "offered" is what was released, not the target
    assert f"target {format_rate(snapshot.target_rps)} req/s" in header
    now_rows = dict(StatsPanel().rows(snapshot)[0])
    assert now_rows["target rps"] == format_rate(snapshot.target_rps)


@pytest.mark.parametrize("width", [80, 160])
def test_a_replay_header_shows_its_position_in_the_recording_and_nothing_live(width):
    text = "\n".join(shown(snap(60.0, "ramping"), width, mode="replay"))
    assert "REPLAY ⏸ 1× (ramping)" in text
    assert "01:00 / 02:03 recorded" in text
    for live_only in ("ETA", "left ", "drain", "ready in"):
        assert live_only not in text


def test_a_long_health_detail_gives_way_first_and_does_not_narrow_a_wide_header():
    down = fake_snapshot(95.0, down_at=79.0)
    lines = shown(down, 160)
    assert lines[0].startswith(" rampwatch  RAMPING   SERVER DOWN ") and "connection errors" in lines[0]
    assert lines[1].startswith(" scenario chat ")
