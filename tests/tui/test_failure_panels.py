"""What the panels show when the server fails: the error series on the Rate chart (in
its legend only once there are some), stale server figures with their age, the client's
own queue beside the server's."""

import pytest

from rampwatch.tui.app import make_live_app
from rampwatch.tui.header_bar import HeaderBar
from rampwatch.tui.queue_chart import QueueChart
from rampwatch.tui.stats_panel import StatsPanel
from rampwatch.tui.throughput_chart import ThroughputChart
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.settle import charts_settled


def now_rows(snapshot) -> dict[str, str]:
    return dict(StatsPanel().rows(snapshot)[0])


def test_stale_server_figures_say_how_old_they_are():
    rows = now_rows(fake_snapshot(100.0, stale_at=80.0))
    for label in ("server gen tok/s", "running", "waiting", "KV cache %", "prefix hit %"):
        assert rows[label] == "stale 21 s"  # the last good scrape was at 79.4 s
    assert rows["completed rps"] != "–" and not rows["TTFT p50"].startswith("stale")  # client side goes on
    fresh = now_rows(fake_snapshot(100.0))
    assert fresh["running"] == "32"


def test_a_dead_server_has_no_current_latency():
    rows = now_rows(fake_snapshot(95.0, down_at=80.0))
    assert rows["TTFT p50"] == "–" and rows["ITL p99"] == "–"
    assert rows["completed rps"] == "0.00"


def test_client_queue_rows():
    snapshot = fake_snapshot(60.0)
    snapshot.series["client_queued"][-3:] = [5.0, 7.0, 9.0]
    snapshot.summary["p99_client_queue_time_ms"] = 850.0
    now, so_far = StatsPanel().rows(snapshot)
    assert dict(now)["client queued"] == "7"  # the latest complete second
    assert dict(so_far)["client queue p99 ms"] == "850.0"


@pytest.mark.slow
async def test_error_series_are_in_the_legend_once_they_have_data():
    for t, down_at, expected in ((95.0, None, set()), (110.0, None, {"http err"}), (95.0, 80.0, {"conn err"})):
        app = make_live_app(FrozenSource(fake_snapshot(t, down_at=down_at)), FakeControl())
        async with app.run_test(size=(160, 48)) as pilot:
            await charts_settled(pilot)
            title = str(app.query_one("#w-throughput", ThroughputChart).border_title)
            shown = {label for label in ("http err", "conn err", "timeouts", "proto err") if label in title}
            assert shown == expected, title


@pytest.mark.slow
async def test_client_queue_on_the_queue_chart_without_metrics_too():
    snapshot = fake_snapshot(60.0, metrics=False)
    snapshot.series["client_queued"][30:] = [4.0] * 30
    app = make_live_app(FrozenSource(snapshot), FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await charts_settled(pilot)
        chart = app.query_one("#w-queue", QueueChart)
        assert "client queued" in str(chart.border_title)
        assert chart._message is None  # drawn, not replaced by the "no /metrics" message
        assert "no usable /metrics" in str(chart.border_subtitle)


@pytest.mark.parametrize(
    ("kwargs", "label", "detail"),
    [
        ({"t": 95.0}, " OK ", None),
        ({"t": 110.0}, " DEGRADED ", "errors in 10 s (http 4)"),
        (
            {"t": 95.0, "down_at": 80.0},
            " SERVER DOWN ",
            "since 01:19: 213 connection errors; metrics stale since 01:19",
        ),
        ({"t": 100.0, "stale_at": 80.0}, " METRICS STALE ", "since 01:19 (21 s ago)"),
    ],
)
def test_the_header_names_the_health_after_the_state_and_its_detail_at_the_end(kwargs, label, detail):
    line1 = HeaderBar().render_text(fake_snapshot(**kwargs)).plain.split("\n")[0]
    assert line1.index(label) == line1.index("RAMPING") + len("RAMPING") + 2  # first to survive a narrow terminal
    if detail is not None:
        assert line1.endswith(detail)
    else:
        assert line1.endswith(f"in flight {fake_snapshot(**kwargs).in_flight}")
