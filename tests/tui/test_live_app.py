"""Pilot tests of the live screen: the keys call the RunControl, the layout follows the
terminal size, and server panels say when /metrics is missing."""

import pytest

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.app import is_wide, make_live_app
from rampwatch.tui.help_screen import HelpScreen
from rampwatch.tui.kv_chart import KvChart
from rampwatch.tui.mark_dialog import MarkDialog
from rampwatch.tui.quit_dialog import QuitDialog
from rampwatch.tui.stats_panel import StatsPanel
from rampwatch.tui.throughput_chart import ThroughputChart
from tests.tui.fakes import FakeControl, FrozenSource, SteeredFake, fake_snapshot

NARROW = (80, 24)
WIDE = (160, 48)


def live_app(t=60.0, *, metrics=True, state=None, **kwargs):
    control = FakeControl()
    source = FrozenSource(fake_snapshot(t, metrics=metrics, state=state))
    return make_live_app(source, control, **kwargs), control, source


@pytest.mark.slow
async def test_space_holds_then_resumes():
    app, control, _ = live_app(60.0)  # ramping
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("space")
        await pilot.press("space")
    assert control.calls == [("hold", None), ("resume", None)]


@pytest.mark.slow
async def test_space_resumes_a_held_run():
    app, control, _ = live_app(45.0)  # inside the fake hold
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("space")
    assert control.calls == [("resume", None)]


@pytest.mark.slow
async def test_plus_and_minus_step_the_rate():
    app, control, _ = live_app(60.0)  # ~9.9 rps → 0.5 rps steps
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("plus", "plus", "minus", "equals_sign")
    assert control.calls == [("step_rate", 0.5), ("step_rate", 0.5), ("step_rate", -0.5), ("step_rate", 0.5)]


@pytest.mark.slow
async def test_configured_rate_step_is_used():
    app, control, _ = live_app(60.0, rate_step_rps=2.0)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("minus")
    assert control.calls == [("step_rate", -2.0)]


@pytest.mark.slow
async def test_m_adds_a_mark_with_the_typed_note():
    app, control, _ = live_app(60.0)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("m")
        assert isinstance(app.screen, MarkDialog)
        # Keys typed into the note must not steer the run.
        await pilot.press(*"s m +", "enter")
        assert not isinstance(app.screen, MarkDialog)
    assert control.calls == [("mark", "s m +")]


@pytest.mark.slow
async def test_escape_cancels_the_mark():
    app, control, _ = live_app(60.0)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.press("m", "x", "escape")
        assert not isinstance(app.screen, MarkDialog)
    assert control.calls == []


@pytest.mark.slow
async def test_s_stops_gracefully_once():
    app, control, _ = live_app(60.0)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("s")
    assert control.calls == [("stop", None)]


@pytest.mark.slow
async def test_s_does_nothing_when_the_run_is_already_stopping():
    app, control, _ = live_app(60.0, state="stopping")
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("s")
    assert control.calls == []


@pytest.mark.slow
async def test_q_asks_while_a_run_is_active_and_n_keeps_it_running():
    app, control, _ = live_app(60.0)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("n")
        assert not isinstance(app.screen, QuitDialog)
        assert app.is_running
    assert control.calls == []


@pytest.mark.slow
async def test_q_then_y_stops_the_run_and_exits():
    app, control, _ = live_app(60.0)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("q")
        await pilot.press("y")
        await pilot.pause()
    assert control.calls == [("stop", None)]
    assert app.return_code == 0


@pytest.mark.slow
async def test_q_quits_at_once_when_the_run_is_done():
    app, control, _ = live_app(120.0)  # done
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, QuitDialog)
    assert control.calls == []
    assert app.return_code == 0


@pytest.mark.slow
@pytest.mark.parametrize("leave_after_s", [0.2, None])
async def test_a_repeat_before_the_last_closes_its_finished_screen_by_itself(leave_after_s):
    # `run --repeats N` unattended: repeat k's screen goes on to the next once done; a
    # plain run's (None) waits for q as before
    app, control, source = live_app(60.0)  # ramping
    app.leave_when_done_s = leave_after_s
    async with app.run_test(size=NARROW) as pilot:
        source._snapshot = fake_snapshot(120.0)  # the run ends
        for _ in range(20):
            await pilot.pause(0.1)
            if app.return_code is not None:
                break
        closed = app.return_code
    assert control.calls == []
    assert closed == (0 if leave_after_s is not None else None)


@pytest.mark.slow
async def test_question_mark_shows_the_keys():
    app, control, _ = live_app(60.0)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("space")  # keys go to the help, not to the run
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
    assert control.calls == []


@pytest.mark.slow
async def test_at_80x24_the_help_scrolls_from_the_keyboard_to_its_last_line():
    app, _, _ = live_app(60.0)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("question_mark")
        box = app.screen.query_one("#help-box")
        assert box.max_scroll_y > 0  # the keys do not fit 24 lines: only scrolling reaches the rest
        await pilot.press("end")
        await pilot.pause()
        assert box.scroll_y == box.max_scroll_y
        await pilot.press("home")
        await pilot.pause()
        assert box.scroll_y == 0
        for _ in range(3):
            await pilot.press("down")
        await pilot.pause()
        assert box.scroll_y > 0


@pytest.mark.slow
async def test_without_control_the_keys_do_not_steer():
    source = FrozenSource(fake_snapshot(60.0))
    app = make_live_app(source, None)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("space", "plus", "s", "m")
        assert not isinstance(app.screen, MarkDialog)


@pytest.mark.parametrize(
    "size, wide", [((80, 24), False), ((119, 48), False), ((160, 35), False), ((120, 36), True), ((200, 60), True)]
)
def test_layout_threshold(size, wide):
    from textual.geometry import Size

    assert is_wide(Size(*size)) is wide


@pytest.mark.slow
async def test_layout_follows_resizes():
    app, _, _ = live_app(60.0)
    async with app.run_test(size=NARROW) as pilot:
        assert app.query_one("#narrow").display and not app.query_one("#wide").display
        await pilot.resize_terminal(*WIDE)
        await pilot.pause()
        assert app.query_one("#wide").display and not app.query_one("#narrow").display
        await pilot.resize_terminal(*NARROW)
        await pilot.pause()
        assert app.query_one("#narrow").display


@pytest.mark.slow
async def test_digits_switch_tabs_on_narrow_terminals():
    app, _, _ = live_app(60.0)
    async with app.run_test(size=NARROW) as pilot:
        tabs = app.query_one("#narrow")
        assert tabs.active == "tab-throughput"
        await pilot.press("6")
        assert tabs.active == "tab-stats"
        await pilot.press("2")
        assert tabs.active == "tab-queue"


@pytest.mark.slow
async def test_every_panel_gets_the_snapshot():
    app, _, source = live_app(95.0)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert source.polls >= 1
        shown, hidden = app.query_one("#w-throughput", ThroughputChart), app.query_one("#n-throughput", ThroughputChart)
        assert shown._message is None and shown.draws >= 1
        assert hidden.draws == 0  # the narrow layout's twin is hidden: not drawn for nothing
        stats = app.query_one("#w-stats", StatsPanel)
        assert stats.snapshot is not None and stats.snapshot.t == 95.0


@pytest.mark.slow
async def test_a_chart_is_drawn_once_its_tab_is_shown():
    app, _, _ = live_app(95.0)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.pause()
        kv = app.query_one("#n-kv", KvChart)
        assert kv.draws == 0  # tab 1 is showing
        await pilot.press("3")
        await pilot.pause()
        assert kv.draws == 1 and kv._message is None  # as soon as it has a size


@pytest.mark.slow
async def test_server_panels_say_when_metrics_are_missing():
    app, _, _ = live_app(60.0, metrics=False)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        kv = app.query_one("#w-kv", KvChart)
        assert kv._message == "KV cache: no usable /metrics from http://127.0.0.1:8000/metrics"
        assert "no usable /metrics" in str(kv.render())
        # Client panels keep working.
        assert app.query_one("#w-throughput", ThroughputChart)._message is None
        assert app.query_one("#w-latency")._message is None
        now, _ = app.query_one("#w-stats", StatsPanel).rows(app.latest)
        assert ("KV cache %", "no /metrics") in now
        assert ("TTFT p50", "–") not in now


@pytest.mark.slow
async def test_polls_at_most_four_times_a_second():
    app, _, source = live_app(60.0, refresh_hz=50.0)
    assert app.refresh_hz == 4.0
    async with app.run_test(size=NARROW) as pilot:
        polls = source.polls
        await pilot.pause(1.0)
        assert source.polls - polls <= 5


@pytest.mark.slow
async def test_no_color_draws_charts_without_colour(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app, _, _ = live_app(95.0)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        chart = app.query_one("#w-throughput", ThroughputChart)
        assert chart.monochrome and chart.theme == "clear"
        assert "\x1b[38" not in chart.plt.build()  # no colour escapes in the plot


@pytest.mark.slow
async def test_throughput_chart_names_the_missing_server_series():
    app, _, _ = live_app(60.0, metrics=False)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        chart = app.query_one("#w-throughput", ThroughputChart)
        assert "no usable /metrics from http://127.0.0.1:8000/metrics" in str(chart.border_subtitle)
    app, _, _ = live_app(60.0, metrics=True)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert app.query_one("#w-throughput", ThroughputChart).border_subtitle == ""


class SteppingSource:
    """Hands out the snapshots it is given, one per poll, then repeats the last."""

    def __init__(self, snapshots):
        self.snapshots = list(snapshots)

    def snapshot(self):
        return self.snapshots.pop(0) if len(self.snapshots) > 1 else self.snapshots[0]


@pytest.mark.slow
async def test_charts_are_rebuilt_only_when_a_bin_or_event_is_added():
    # Four polls inside one second of the run, then a new bin.
    source = SteppingSource([fake_snapshot(t) for t in (60.0, 60.1, 60.3, 60.5, 60.7, 61.1)])
    app = make_live_app(source, FakeControl(), refresh_hz=0.1)  # polled by hand only
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        app.poll_source()  # the first poll ran before the layout had its size
        await pilot.pause()
        chart = app.query_one("#w-throughput", ThroughputChart)
        first = chart.draws
        assert first >= 1
        for _ in range(3):
            app.poll_source()
            await pilot.pause()
        assert chart.draws == first  # same bins: the plot is not rebuilt
        assert app.latest.t == 60.7  # …but the snapshot did arrive (header, stats)
        app.poll_source()
        await pilot.pause()
        assert chart.draws == first + 1


@pytest.mark.slow
async def test_screen_is_repainted_whole_after_a_mark_toast_has_gone():
    """A toast's region must not keep its text once the toast has timed out, even if the
    panels under it (the events panel can stay unchanged for minutes) never redraw."""
    from textual.widgets._toast import Toast

    from rampwatch.tui.app import TOAST_REPAINT_DELAY_S
    from rampwatch.tui.event_log import EventLog
    from rampwatch.tui.steering import CONFIRMATION_TOAST_S
    from tests.tui.test_event_log import screen_lines

    control = SteeredFake(fake_snapshot(95.0))
    app = make_live_app(control, control)
    async with app.run_test(size=WIDE, notifications=True) as pilot:
        await pilot.press("m", *"steady before the knee", "enter")
        app.poll_source()  # the mark comes back in the run's next snapshot
        await pilot.pause(0.2)
        assert any("M2 recorded at 01:35: steady before the knee" in line for line in screen_lines(app))
        updates = []
        display = app._display

        def spy(screen, update):
            updates.append(update)
            return display(screen, update)

        app._display = spy
        await pilot.pause(CONFIRMATION_TOAST_S + TOAST_REPAINT_DELAY_S + 0.3)
        assert not app.screen.query(Toast)
        full = [u for u in updates if getattr(u, "region", None) == app.screen.region]
        assert full, "no full-screen repaint after the toast timed out"
        lines = screen_lines(app)
        assert not any("recorded at 01:35" in line for line in lines)  # the toast (the events panel has the mark)
        events = app.query_one("#w-events", EventLog).region
        assert lines[events.bottom - 1][events.x] == "╰" and lines[events.bottom - 1][events.right - 1] == "╯"
        for y in range(events.y + 1, events.bottom - 1):
            assert lines[y][events.x] == "│" and lines[y][events.right - 1] == "│"
    assert control.calls == [("mark", "steady before the knee")]


def test_help_settings_show_the_values_in_use_and_their_flags():
    from dataclasses import replace

    from rampwatch.tui.help_screen import help_settings
    from tests.tui.fakes import fake_snapshot

    snap = fake_snapshot(95.0)  # ~15 rps: the default step is 1 rps
    live = help_settings(snap)
    assert live["ramp"] == "ramp: linear 1 → 20 req/s over 120 s, poisson arrivals"
    assert live["step"] == "step now 1 req/s (default: ~10% of the rate; --rate-step)"
    assert live["grace"] == "10 s for in-flight requests (--stop-grace, default 10 s)"
    assert live["drain"] == "drain: wait for every request in flight (--drain, or the scenario's drain:)"
    assert live["scenario"] == "scenario chat · no concurrency cap · SLO TTFT 2000 ms, TPOT 100 ms"
    assert help_settings(snap, configured_step=2.5)["step"] == "step 2.5 req/s (--rate-step)"
    header = replace(
        snap.header, options={"rate_step": 3, "stop_grace": 4, "drain": "cap:30"}, scenario={"max_concurrency": 8}
    )
    from_header = help_settings(replace(snap, header=header))
    assert from_header["step"] == "step 3 req/s (--rate-step)" and from_header["grace"].startswith("4 s ")
    assert from_header["drain"].startswith("drain: at most 30 s after the schedule, then cancel what is left")
    assert "ramp" not in from_header and from_header["scenario"] == "scenario chat · max concurrency 8"
    replay = help_settings(snap, speed=4.0, knee_at=78.0, mark_count=2)
    assert replay["speed"] == "now 4× (--speed, default 1×)" and replay["knee"] == "knee at 01:18"
    assert replay["marks"] == "2 marks in this recording"
    assert "linear 1 → 20 req/s" in replay["scenario"]  # a replay has no ramp key to put it beside
    assert help_settings(snap, speed=1.0)["knee"] == "no knee in this recording"
    empty = help_settings(Snapshot.empty())
    assert "scenario" not in empty and "ramp" not in empty and empty["grace"].startswith("--stop-grace")


@pytest.mark.slow
async def test_help_shows_the_settings_of_the_run():
    from rich.console import Console

    from rampwatch.tui.help_screen import keys_table

    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl(), rate_step_rps=2.0)
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        console = Console(width=74, record=True)
        console.print(keys_table("live", app.screen.settings))
        text = console.export_text()
    assert "step 2 req/s (--rate-step)" in text
    assert "ramp: linear 1 → 20 req/s over 120 s" in text
