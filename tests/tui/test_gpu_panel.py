"""The GPU panel: hidden in a run without GPU telemetry, shown once GPU data comes (live
and replay alike: both hand the app a Snapshot), and the figures it derives."""

from __future__ import annotations

import math

import pytest

from rampwatch.tui.app import make_live_app
from rampwatch.tui.gpu_chart import GpuChart
from rampwatch.tui.gpu_view import gpu_legend_note, gpu_stale_since, has_gpu, per_gpu_lines, power_text
from rampwatch.tui.header_bar import HeaderBar
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.gpu_fakes import with_gpus

WIDE = (120, 40)


@pytest.mark.slow
async def test_the_panel_is_hidden_without_gpu_data_and_shown_when_it_comes():
    source = FrozenSource(fake_snapshot(60.0))
    app = make_live_app(source, FakeControl())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert not app.query_one("#w-gpu", GpuChart).display
        assert app.query_one("#w-throughput").styles.column_span == 2
        tabs = app.query_one("#narrow")
        assert tabs.get_tab("tab-gpu").display is False
        assert "GPU" not in app.query_one(HeaderBar).render_text(app.latest).plain
        assert not any(
            label.startswith("GPU") for label, _ in app.query_one("#w-stats", StatsPanel).rows(app.latest)[0]
        )

        source._snapshot = with_gpus(fake_snapshot(61.0))  # the first GPU sample arrives
        app.poll_source()
        await pilot.pause()
        await pilot.pause()
        assert app.query_one("#w-gpu", GpuChart).display and app.gpu_shown
        assert app.query_one("#w-throughput").styles.column_span == 1
        assert tabs.get_tab("tab-gpu").display is True
        assert "GPU" in app.query_one(HeaderBar).render_text(app.latest).plain
        now, so_far = app.query_one("#w-stats", StatsPanel).rows(app.latest)
        assert [label for label, _ in now if label.startswith("GPU")] == ["GPU util %", "GPU power W", "GPU 0", "GPU 1"]
        assert {label for label, _ in so_far} >= {"GPU energy Wh", "output tok/J"}


def test_gpu_figures_for_the_screen():
    snap = with_gpus(fake_snapshot(60.0), count=2)
    assert has_gpu(snap) and gpu_stale_since(snap) is None
    assert power_text(snap) == f"{snap.series['gpu_power_w'][-2]:.0f} W"  # the newest complete second
    assert [gpu for gpu, _ in per_gpu_lines(snap)] == ["GPU 0", "GPU 1"]
    util, power = per_gpu_lines(snap)[0][1].split(" ", 1)
    assert util.endswith("%") and power.endswith(" W")
    assert gpu_legend_note(snap).startswith("mem 140.6 GiB · SM 1980 MHz")

    none = fake_snapshot(60.0)
    assert not has_gpu(none) and power_text(none) is None


@pytest.mark.parametrize(("stale_at", "stale"), [(None, False), (58.0, False), (50.0, True)])
def test_gpu_figures_go_stale_after_three_scrape_intervals(stale_at, stale):
    snap = with_gpus(fake_snapshot(60.0), stale_at=stale_at)
    assert (gpu_stale_since(snap) is not None) == stale
    if stale:
        assert power_text(snap) == "stale" and gpu_legend_note(snap) == "GPU telemetry stale 10 s"
    else:
        assert power_text(snap).endswith(" W")


def test_a_recording_made_before_gpu_telemetry_replays_without_a_gpu_panel():
    from pathlib import Path

    from rampwatch.record.reader import open_recording
    from rampwatch.record.replay import ReplayTimeline

    with open_recording(Path(__file__).resolve().parents[1] / "data" / "small.rwrec") as rec:
        assert rec.header.gpu_sources == [] and not any(s.is_gpu for s in rec.samples)
        replay = ReplayTimeline(rec, warm_up=False)
        replay.seek(rec.duration_s)
        snap = replay.snapshot()
    assert snap.times and snap.gpus == {} and not has_gpu(snap)
    assert all(math.isnan(v) for v in snap.series["gpu_power_w"]) and snap.summary["tokens_per_joule"] is None
