"""A mixture on screen: `w` switches the latency chart between every request and each
class; the Classes panel shows each class's figures, live and in replay alike."""

from __future__ import annotations

import pytest

from rampwatch.tui.app import make_live_app, make_replay_app
from rampwatch.tui.class_panel import ClassPanel, class_columns, class_view, next_class
from rampwatch.tui.latency_chart import LatencyChart
from tests.tui.fakes import FAKE_CLASSES, FakeControl, FakeReplay, FrozenSource, fake_mixed_snapshot, fake_snapshot
from tests.tui.settle import charts_settled

NAMES = [name for name, *_ in FAKE_CLASSES]


class MixedReplay(FakeReplay):
    def snapshot(self):
        return fake_mixed_snapshot(self.position, state="replay")


def mixed_live():
    return make_live_app(FrozenSource(fake_mixed_snapshot(95.0)), FakeControl(), recording="runs/mixed.rwrec")


@pytest.mark.parametrize(
    ("current", "expected"),
    [(None, "chat"), ("chat", "classification"), ("code-generation", None), ("gone", "chat")],
)
def test_w_goes_through_every_class_then_back_to_every_request(current, expected):
    assert next_class(NAMES, current) == expected
    assert next_class([], current) is None


def test_a_class_view_draws_the_class_series_under_the_run_names():
    snap = fake_mixed_snapshot(95.0)
    view = class_view(snap, "classification")
    assert view.series["ttft_p99"] == snap.classes[1].series["ttft_p99"]
    assert view.series["kv_usage_pct"] == snap.series["kv_usage_pct"]  # the server's stay
    other = class_view(fake_snapshot(95.0), "classification")  # a compared run without it
    assert all(v != v for v in other.series["ttft_p50"])


def test_class_columns_follow_the_class_summaries():
    snap = fake_mixed_snapshot(95.0)
    columns = dict(class_columns(snap))
    assert list(columns) == NAMES
    for (name, _share, _scale, met), figures in zip(FAKE_CLASSES, snap.classes, strict=True):
        cells = dict(zip(("ended", "req/s", "ttft50", "ttft99", "itl50", "itl99", "slo"), columns[name], strict=True))
        assert cells["ended"] == f"{figures.summary['completed'] + figures.summary['failed']:,}"
        assert float(cells["slo"]) == pytest.approx(met, abs=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("replay", [False, True])
async def test_w_switches_the_latency_chart_and_marks_the_class(replay):
    app = make_replay_app(MixedReplay(position=95.0), recording="runs/mixed.rwrec") if replay else mixed_live()
    async with app.run_test(size=(160, 48)) as pilot:
        await charts_settled(pilot)
        chart = app.main_screen.query_one("#w-latency", LatencyChart)
        panel = app.main_screen.query_one("#w-classes", ClassPanel)
        assert panel.display and chart.class_name is None
        for name in [*NAMES, None]:
            await pilot.press("w")
            await charts_settled(pilot)
            assert chart.class_name == name and panel.shown_class == name
            title = str(chart.border_title)
            assert (f"class {name}" in title) if name else ("class" not in title)


@pytest.mark.slow
async def test_w_without_a_mixture_says_so_and_changes_nothing():
    app = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl(), recording="runs/chat.rwrec")
    async with app.run_test(size=(160, 48)) as pilot:
        await charts_settled(pilot)
        assert not app.main_screen.query_one("#w-classes", ClassPanel).display
        await pilot.press("w")
        await pilot.pause()
        assert app.main_screen.query_one("#w-latency", LatencyChart).class_name is None
        assert any("no classes" in str(n.message) for n in app._notifications)


async def chat_class_shown(pilot) -> None:
    await charts_settled(pilot)
    await pilot.press("w")
    await charts_settled(pilot)


@pytest.mark.slow
def test_mixed_run_latency_of_the_chat_class_160x48(snap_compare):
    """The latency chart shows the chat class (its name in the title); the Classes panel
    under the stats marks it, beside the other two classes' figures."""
    assert snap_compare(mixed_live(), terminal_size=(160, 48), run_before=chat_class_shown)


@pytest.mark.slow
def test_mixed_replay_latency_tab_of_a_class_100x34(snap_compare):
    """A narrow replay's Latency tab after `w`: the classification class's latencies, the
    Classes panel under the chart. (At 80x24 the chart's nine rows make plotext place
    colliding tick labels differently from one process to the next.)"""

    async def latency_tab(pilot) -> None:
        await charts_settled(pilot)
        await pilot.press("5", "w", "w")
        await charts_settled(pilot)

    app = make_replay_app(MixedReplay(position=95.0), recording="runs/mixed.rwrec")
    assert snap_compare(app, terminal_size=(100, 34), run_before=latency_tab)
