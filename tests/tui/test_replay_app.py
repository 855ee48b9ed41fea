"""Pilot tests of the replay screen: the keys drive the ReplayTimeline controls."""

from pathlib import Path

import pytest

from rampwatch.tui.app import make_replay_app
from rampwatch.tui.header_bar import HeaderBar
from rampwatch.tui.latency_chart import LatencyChart
from rampwatch.tui.position_bar import PositionBar
from rampwatch.tui.replay_keys import next_speed
from tests.tui.fakes import KNEE_AT, MARK_AT, FakeReplay, FrozenSource, fake_snapshot

SIZE = (100, 30)
FIXTURE = Path(__file__).resolve().parents[1] / "data" / "small.rwrec"


@pytest.mark.slow
async def test_space_toggles_play():
    replay = FakeReplay(position=30.0)
    app = make_replay_app(replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("space")
        assert replay.playing
        await pilot.press("space")
        assert not replay.playing


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
async def test_live_keys_do_nothing_in_replay():
    replay = FakeReplay(position=60.0)
    app = make_replay_app(replay)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("m", "s", "plus")
        assert app.screen is app.screen_stack[0]
    assert replay.calls == []


@pytest.mark.slow
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


@pytest.mark.slow
async def test_footer_shows_the_replay_keys_and_no_live_ones():
    from textual.widgets import Footer

    app = make_replay_app(FakeReplay(position=30.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = {key.description for key in app.screen.query_one(Footer).query("FooterKey")}
        assert {"play/pause", "speed", "±10s", "knee", "marks", "help", "quit"} <= shown
        assert not shown & {"hold/resume", "+rate", "-rate", "mark", "stop"}
        # and all of them fit on an 80-column footer
        last = sorted(app.screen.query_one(Footer).query("FooterKey"), key=lambda k: k.region.x)[-1]
        assert last.region.right <= 80


@pytest.mark.slow
async def test_compare_shows_b_marks_holds_and_resumes_dimmed():
    from rampwatch.tui.chart_data import markers
    from rampwatch.tui.timeseries_chart import COMPARED

    app = make_replay_app(FakeReplay(position=30.0), compare=FrozenSource(fake_snapshot(120.0)))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        chart = app.main_screen.query_one("#w-latency", LatencyChart)
        drawn = []
        chart._draw_markers = lambda marks, left, right, top, _draw=chart._draw_markers: (  # type: ignore[method-assign]
            drawn.extend(marks),
            _draw(marks, left, right, top),
        )
        chart.draw(app.latest, app.compare_snapshot)
        compared = [m.label for m in drawn if m.kind == COMPARED]
        assert compared == [f"{m.label}(B)" for m in markers(fake_snapshot(120.0).events)]
        assert {"K(B)", "H(B)", "R(B)", "M1(B)"} <= set(compared)


@pytest.mark.slow
async def test_compare_panel_of_a_recording_with_itself_is_within_noise():
    from rampwatch.app.replay import comparison_of
    from rampwatch.record.reader import open_recording
    from rampwatch.record.replay import ReplayTimeline
    from rampwatch.tui.compare_panel import ComparePanel
    from tests.tui.settle import compared_and_settled

    fixture = str(FIXTURE)
    timeline = ReplayTimeline(open_recording(fixture), warm_up=False)
    app = make_replay_app(timeline, comparison=comparison_of(fixture, fixture))
    async with app.run_test(size=(160, 48)) as pilot:
        await compared_and_settled(pilot)
        panel = app.main_screen.query_one("#w-compare", ComparePanel)
        assert panel.warning is None
        tested = [r for r in panel.rows if r["verdict"] != "-"]
        assert len(tested) >= 10 and {r["verdict"] for r in tested} == {"within noise"}


@pytest.fixture
def not_a_recording(tmp_path):
    bad = tmp_path / "b.rwrec"
    bad.write_bytes(b"not a recording")
    return bad


@pytest.mark.slow
async def test_compare_panel_says_when_the_runs_cannot_be_compared(not_a_recording):
    from rampwatch.app.replay import comparison_of
    from rampwatch.tui.compare_panel import ComparePanel

    bad = not_a_recording
    app = make_replay_app(FakeReplay(position=30.0), comparison=comparison_of(str(bad), str(bad)))
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.main_screen.query_one("#w-compare", ComparePanel)
        await app.workers.wait_for_complete()
        await pilot.pause()  # the worker hands its answer over through the message queue
        assert panel.failure is not None and panel.failure.startswith("cannot compare the runs:")
        assert str(bad) in panel.failure and "\n" not in panel.failure
        assert app.is_running  # the replay goes on
