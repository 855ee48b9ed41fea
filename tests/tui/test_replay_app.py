"""Pilot tests of the replay screen: the keys drive the ReplayTimeline controls."""

import pytest

from rampwatch.tui.app import make_replay_app, next_speed
from rampwatch.tui.header_bar import HeaderBar
from rampwatch.tui.latency_chart import LatencyChart
from rampwatch.tui.position_bar import PositionBar
from tests.tui.fakes import KNEE_AT, MARK_AT, FakeReplay, FrozenSource, fake_snapshot

SIZE = (100, 30)


async def test_space_toggles_play():
    replay = FakeReplay(position=30.0)
    app = make_replay_app(replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        assert replay.playing
        await pilot.press("space")
        assert not replay.playing


async def test_arrows_and_pages_seek():
    replay = FakeReplay(position=30.0)
    app = make_replay_app(replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right")
        assert replay.position == 40.0
        await pilot.press("left", "left")
        assert replay.position == 20.0
        await pilot.press("pagedown")
        assert replay.position == 80.0
        await pilot.press("shift+left")
        assert replay.position == 20.0
        await pilot.press("end")
        assert replay.position == replay.duration
        await pilot.press("home")
        assert replay.position == 0.0


async def test_speed_keys_double_and_halve_within_1_to_16():
    replay = FakeReplay()
    app = make_replay_app(replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("right_square_bracket")
        assert replay.speed == 2.0
        await pilot.press(*["greater_than_sign"] * 5)
        assert replay.speed == 16.0
        await pilot.press("left_square_bracket", "less_than_sign")
        assert replay.speed == 4.0
        await pilot.press(*["left_square_bracket"] * 4)
        assert replay.speed == 1.0


async def test_k_jumps_to_the_knee_and_n_p_walk_the_marks():
    replay = FakeReplay(position=10.0)
    app = make_replay_app(replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("k")
        assert replay.position == KNEE_AT
        await pilot.press("n")
        assert replay.position == MARK_AT
        await pilot.press("n")  # no further mark: stays
        assert replay.position == MARK_AT
        await pilot.press("home", "n", "p")
        assert replay.position == MARK_AT


async def test_position_bar_and_header_follow_the_replay():
    replay = FakeReplay(position=60.0)
    app = make_replay_app(replay, recording="a.rwrec")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space", "right_square_bracket", "right")
        await pilot.pause(0.3)
        bar = app.query_one(PositionBar)
        assert (bar.position, bar.duration, bar.speed, bar.playing) == (70.0, 120.0, 2.0, True)
        assert {letter for _, letter in bar.marks} == {"K", "M", "H"}  # knee, mark, hold
        assert "REPLAY ▶ 2×" in str(app.query_one(HeaderBar).render_text(app.latest))
        assert app.latest.t == 70.0


async def test_live_keys_do_nothing_in_replay():
    replay = FakeReplay(position=60.0)
    app = make_replay_app(replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("m", "s", "plus")
        assert app.screen is app.screen_stack[0]
    assert replay.calls == []


async def test_compare_draws_b_dimmed_with_a_legend_label():
    replay = FakeReplay(position=50.0)
    compare = FrozenSource(fake_snapshot(120.0))
    app = make_replay_app(replay, compare=compare, compare_label="b.rwrec")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        chart = app.query_one("#w-latency", LatencyChart)
        plot = chart.plt.build()
        # the legend does not fit the title with (B): its right axis part is on the bottom border
        assert "TTFT:" in str(chart.border_title) and "(B)" in str(chart.border_subtitle)
        assert "K(B)" in plot  # B's knee is marked too
        # B's points are drawn: more plotted series than A alone has.
        assert len(chart.plt.monitor.x) == 2 * len(segments_of(app.latest))
        # A is at 50 s but the shared axis spans B's full 120 s.
        assert "2:00" in plot
        assert "vs b.rwrec (B, dimmed)" in str(app.query_one(HeaderBar).render_text(app.latest))


def segments_of(snapshot):
    from rampwatch.tui.chart_data import segments

    return [p for spec in LatencyChart.SERIES for p in segments(snapshot.times, snapshot.series[spec.name])]


@pytest.mark.parametrize(
    "speed, up, expected", [(1, True, 2), (16, True, 16), (1, False, 1), (8, False, 4), (3, True, 4), (3, False, 2)]
)
def test_next_speed(speed, up, expected):
    assert next_speed(speed, up) == expected
