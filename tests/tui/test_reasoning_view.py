"""A reasoning run on screen: the latency chart's TTFT-vs-first-answer view (first in the
cycle, only in a reasoning run), the reasoning share, the stats panel's rows and the step
table's TTFA column; a plain run shows none of it."""

from __future__ import annotations

import pytest

from rampwatch.tui import reasoning_view
from rampwatch.tui.app import make_live_app
from rampwatch.tui.latency_chart import REASONING_VIEW, VIEWS, LatencyChart
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.reasoning_fakes import fake_reasoning_snapshot
from tests.tui.settle import charts_settled


def test_the_stats_rows_of_a_reasoning_run_and_none_in_a_plain_one():
    snap = fake_reasoning_snapshot(95.0)
    now, so_far = (dict(rows) for rows in StatsPanel().rows(snap))
    labels = list(now)
    assert labels[labels.index("ITL p99") + 1 : labels.index("ITL p99") + 4] == ["TTFA p50", "TTFA p99", "reasoning %"]
    assert now["TTFA p50"].endswith(" ms") and float(now["reasoning %"]) == pytest.approx(60.0, abs=5.1)
    assert so_far["reasoning share %"] == "60.0" and so_far["cut short thinking"] == "3"
    plain_now, plain_so_far = (dict(rows) for rows in StatsPanel().rows(fake_snapshot(95.0)))
    assert not [k for k in [*plain_now, *plain_so_far] if "TTFA" in k or "reasoning" in k or "thinking" in k]


def test_the_share_in_the_legend_is_the_latest_complete_window():
    snap = fake_reasoning_snapshot(95.0)
    share = reasoning_view.share_now(snap)
    assert share is not None and reasoning_view.share_title(snap) == f" · reasoning {share:.0f} % of output"
    assert reasoning_view.share_title(fake_snapshot(95.0)) == "" and reasoning_view.now_rows(fake_snapshot(95.0)) == []


@pytest.mark.slow
async def test_the_reasoning_view_comes_first_only_in_a_reasoning_run():
    app = make_live_app(FrozenSource(fake_reasoning_snapshot(95.0)), FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await charts_settled(pilot)
        chart = app.query_one("#w-latency", LatencyChart)
        assert chart.views == (REASONING_VIEW, *VIEWS) and chart.views[chart.view_index] is REASONING_VIEW
        left, right = (part.plain for part in chart.legend_parts(False))
        assert left.startswith("TTFT vs first answer (log) TTFT:") and right.startswith(
            " │ TTFA: ━ p50 ━ p99 · reasoning"
        )
        assert "no data yet" not in str(chart.border_subtitle)  # the TTFA series are drawn
        await pilot.press("v")
        await pilot.pause()
        assert chart.views[chart.view_index] is VIEWS[0] and "Latency" in str(chart.border_title)
    plain = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with plain.run_test(size=(160, 48)) as pilot:
        await charts_settled(pilot)
        assert plain.query_one("#w-latency", LatencyChart).views == VIEWS


@pytest.mark.slow
def test_reasoning_view_80x24(snap_compare):
    app = make_live_app(FrozenSource(fake_reasoning_snapshot(95.0)), FakeControl(), recording="runs/think.rwrec")
    assert snap_compare(app, terminal_size=(80, 24), press=["5"], run_before=charts_settled)
