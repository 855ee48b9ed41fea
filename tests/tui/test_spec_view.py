"""The spec-decode chart and Stats rows: hidden where the server does not speculate, shown
once its spec-decode counters have grown (live and replay alike: both hand the app a
Snapshot), and the figures they show."""

from __future__ import annotations

import dataclasses
import math

import pytest

from rampwatch.core.figures.speculation import SPEC_SERIES_NAMES
from rampwatch.core.timeline import Snapshot
from rampwatch.tui.app import make_live_app
from rampwatch.tui.spec_chart import SpecChart
from rampwatch.tui.spec_view import has_spec, spec_legend_note, spec_now_rows, spec_so_far_rows
from rampwatch.tui.stats_panel import StatsPanel
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.gpu_fakes import with_gpus

WIDE = (120, 40)
SPECULATION = {
    "drafts": 100.0,
    "draft_tokens": 300.0,
    "accepted_tokens": 171.0,
    "acceptance_rate_pct": 57.0,
    "mean_acceptance_length": 2.71,
    "draft_tokens_per_draft": 3.0,
    "per_position_acceptance_pct": [80.0, 56.0, 35.0],
}


def with_spec(snapshot: Snapshot) -> Snapshot:
    n = len(snapshot.times)
    series = dict(snapshot.series)
    series.update({"spec_acceptance_pct": [57.0] * n, "spec_accept_len": [2.71] * n, "spec_draft_len": [3.0] * n})
    summary = dict(snapshot.summary or {})
    summary["server"] = {**(summary.get("server") or {}), "speculation": SPECULATION}
    return dataclasses.replace(snapshot, series=series, summary=summary)


def test_the_figures_for_the_screen():
    snap = with_spec(fake_snapshot(60.0))
    assert has_spec(snap)
    assert spec_now_rows(snap) == [("draft accept %", "57.0"), ("accept length", "2.71")]
    assert spec_so_far_rows(snap) == [
        ("draft accept %", "57.0"),
        ("accept length", "2.71"),
        ("accept by position", "80 / 56 / 35 %"),
    ]
    assert spec_legend_note(snap) == "by position 80 / 56 / 35 %"
    plain = fake_snapshot(60.0)
    assert not has_spec(plain) and spec_now_rows(plain) == [] and spec_so_far_rows(plain) == []
    assert not any(name in plain.series for name in SPEC_SERIES_NAMES)


def test_a_window_without_drafts_reads_as_missing_not_zero():
    snap = with_spec(fake_snapshot(60.0))
    snap.series["spec_acceptance_pct"][-4:] = [math.nan] * 4
    assert spec_now_rows(snap)[0] == ("draft accept %", "–")


@pytest.mark.slow
async def test_the_chart_is_hidden_until_the_server_speculates():
    source = FrozenSource(fake_snapshot(60.0))
    app = make_live_app(source, FakeControl())
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert not app.query_one("#w-spec", SpecChart).display
        tabs = app.query_one("#narrow")
        assert tabs.get_tab("tab-spec").display is False
        assert not any(
            label.startswith("draft") for label, _ in app.query_one("#w-stats", StatsPanel).rows(app.latest)[0]
        )

        source._snapshot = with_spec(fake_snapshot(61.0))
        app.poll_source()
        await pilot.pause()
        await pilot.pause()
        assert app.query_one("#w-spec", SpecChart).display and app.spec_shown
        assert tabs.get_tab("tab-spec").display is True
        now, so_far = app.query_one("#w-stats", StatsPanel).rows(app.latest)
        assert ("accept length", "2.71") in now and ("accept by position", "80 / 56 / 35 %") in so_far


@pytest.mark.slow
async def test_on_a_narrow_screen_each_tab_shown_has_a_digit_key():
    """The tabs shown are numbered 1, 2, … as the digit keys reach them (0 the tenth): the
    Spec tab is 9 while the GPU tab is hidden, 10 (key 0) once it shows."""
    source = FrozenSource(with_spec(fake_snapshot(60.0)))
    app = make_live_app(source, FakeControl())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause()
        tabs = app.query_one("#narrow")
        assert str(tabs.get_tab("tab-spec").label) == "9 Spec"
        await pilot.press("9")
        assert tabs.active == "tab-spec"
        source._snapshot = with_gpus(with_spec(fake_snapshot(61.0)))  # GPU telemetry comes
        app.poll_source()
        await pilot.pause()
        await pilot.pause()
        assert str(tabs.get_tab("tab-gpu").label) == "9 GPU" and str(tabs.get_tab("tab-spec").label) == "10 Spec"
        await pilot.press("9")
        assert tabs.active == "tab-gpu"
        await pilot.press("0")
        assert tabs.active == "tab-spec"
