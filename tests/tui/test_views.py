"""The latency chart's log/linear toggle (`l`) and the step table (`t`, tab 8), live and in
replay."""

import re

import pytest
from textual.content import Content
from textual.widgets import TabbedContent

from rampwatch.core.figures.steps import step_cells
from rampwatch.tui.app import make_live_app, make_replay_app
from rampwatch.tui.latency_chart import LatencyChart
from rampwatch.tui.step_table import StepTable, columns_for
from tests.tui.fakes import FakeControl, FakeReplay, FrozenSource, fake_snapshot

NARROW = (80, 24)
WIDE = (160, 48)


def plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def y_labels(plot: str) -> list[str]:
    """The left axis's tick labels, top to bottom."""
    return [m.group(1) for line in plain(plot).splitlines() if (m := re.match(r"\s*([0-9.]+k?)┤", line))]


@pytest.mark.slow
async def test_l_toggles_the_latency_axes_between_log_and_linear():
    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        chart = app.query_one("#w-latency", LatencyChart)
        assert chart.log_scale and "Latency (log)" in str(chart.border_title)
        log_plot = chart.plt.build()
        assert chart.plt.build() == log_plot  # drawing again changes nothing (plotext's log scale would)
        assert y_labels(log_plot)[0] == "1k" and "10" in y_labels(log_plot)  # decades
        await pilot.press("l")
        await pilot.pause()
        assert not chart.log_scale and "Latency (linear)" in str(chart.border_title)
        linear = y_labels(chart.plt.build())
        assert linear[-1] == "0" and linear != y_labels(log_plot)
        narrow_twin = app.query_one("#n-latency", LatencyChart)
        assert not narrow_twin.log_scale  # one state for both layouts
        await pilot.press("l")
        await pilot.pause()
        assert chart.log_scale and y_labels(chart.plt.build()) == y_labels(log_plot)


@pytest.mark.slow
async def test_t_shows_the_step_table_over_the_charts_on_a_wide_screen():
    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        grid, table = app.query_one("#chart-grid"), app.query_one("#w-steps", StepTable)
        assert grid.display and not table.display
        await pilot.press("t")
        await pilot.pause()
        assert table.display and not grid.display
        assert table._shown is not None and len(table._shown) == len(app.latest.steps) == 10
        assert [c["kind"] for c in table._shown].count("hold") == 1
        await pilot.press("t")
        assert grid.display and not table.display


@pytest.mark.slow
async def test_t_and_8_open_the_steps_tab_on_a_narrow_screen():
    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with app.run_test(size=NARROW) as pilot:
        await pilot.pause()
        tabs = app.query_one("#narrow", TabbedContent)
        await pilot.press("t")
        assert tabs.active == "tab-steps"
        await pilot.press("1")
        assert tabs.active == "tab-throughput"
        await pilot.press("8")
        assert tabs.active == "tab-steps"


@pytest.mark.slow
async def test_replay_shows_the_recordings_step_rows():
    replay = FakeReplay(position=60.0)
    app = make_replay_app(replay)
    async with app.run_test(size=NARROW) as pilot:
        await pilot.press("8")
        await pilot.pause()
        table = app.query_one("#n-steps", StepTable)
        assert table._shown is not None
        assert [c["kind"] for c in table._shown] == [row.kind for row in fake_snapshot(60.0).steps]
        await pilot.press("end")  # seeking redraws the rows at the new position
        await pilot.pause()
        assert len(table._shown) == len(fake_snapshot(120.0).steps) > len(fake_snapshot(60.0).steps)


@pytest.mark.parametrize(
    "width, dropped, short",
    [
        (160, [], False),
        (109, [], False),
        (108, [], True),  # short headers before dropping a column
        (76, [], True),  # 80 columns less the panel's border and padding: all of them
        (74, ["out tok/s"], True),
        (68, ["out tok/s", "kind"], True),
        (40, ["out tok/s", "kind", "start"], True),  # never fewer than the essentials
    ],
)
def test_columns_for_width(width, dropped, short):
    cells = [step_cells(row) for row in fake_snapshot(95.0).steps]
    columns = columns_for(width, cells)
    names = [name for name, _ in columns]
    assert [n for n in ("out tok/s", "kind", "start") if n not in names] == dropped
    assert all(name == header for name, header in columns) != short


@pytest.mark.slow
@pytest.mark.parametrize("size", [(120, 36), (160, 48), (80, 24)])
@pytest.mark.parametrize("compare", [False, True])
async def test_no_chart_legend_is_cut_off(size, compare):
    """Every label of every legend is on screen: a legend too long for the title puts its
    right axis's part on the bottom border."""
    from rampwatch.tui.timeseries_chart import TimeSeriesChart
    from tests.tui.settle import charts_settled

    if compare:
        app = make_replay_app(FakeReplay(position=95.0), compare=FrozenSource(fake_snapshot(120.0)))
    else:
        app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with app.run_test(size=size) as pilot:
        await charts_settled(pilot)
        for index in range(1, 6):  # on narrow screens each chart is drawn once its tab shows
            await pilot.press(str(index))
            await charts_settled(pilot)
        for chart in app.query(TimeSeriesChart):
            if not chart.size.area:
                continue
            room = chart.size.width + 2 - 6  # the border's corners and the title's padding
            title, subtitle = (
                text if isinstance(text, Content) else Content.from_markup(text or "")
                for text in (chart.border_title, chart.border_subtitle)
            )
            assert title.cell_length <= room, (chart.id, title.plain)
            assert subtitle.cell_length <= room, (chart.id, subtitle.plain)
            labels = [spec.label for spec in chart.SERIES if not spec.hide_zero]  # hide_zero: absent when 0
            shown = title.plain + " " + subtitle.plain
            assert all(label in shown for label in labels), (chart.id, shown)
            assert ("(B)" in shown) == compare


@pytest.mark.slow
async def test_v_cycles_the_latency_views_and_keeps_the_axis_scale():
    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        chart = app.query_one("#w-latency", LatencyChart)
        first = plain(chart.plt.build())
        assert "ITL ms" in first  # the right axis
        seen = []
        for _ in range(3):
            await pilot.press("v")
            await pilot.pause()
            title = Content.from_markup(str(chart.border_title)).plain
            seen.append((title, [s.name for s in chart.SERIES], plain(chart.plt.build())))
        (ttft_title, ttft, ttft_plot), (itl_title, itl, itl_plot), (back_title, back, back_plot) = seen
        assert ttft_title.startswith("TTFT percentiles (log)") and ttft == ["ttft_p50", "ttft_p90", "ttft_p99"]
        assert itl_title.startswith("ITL percentiles (log)") and itl == ["itl_p50", "itl_p90", "itl_p99"]
        assert "ITL ms" not in ttft_plot and "TTFT ms" in ttft_plot  # one axis: no right axis left over
        assert back_title.startswith("Latency (log)") and back_plot == first
        assert app.query_one("#n-latency", LatencyChart).view_index == 0  # both layouts follow
