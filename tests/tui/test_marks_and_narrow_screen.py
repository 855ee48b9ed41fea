"""What an 80×24 terminal keeps (the header's in-flight and ETA, the whole knee banner,
every footer key whole) and chart markers that never overprint each other."""

from __future__ import annotations

import dataclasses

import pytest

from rampwatch.core.timeline import Event
from rampwatch.tui.app import make_live_app
from rampwatch.tui.chart_data import Marker, MarkerLabel, marker_labels
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.test_knee_explanation import explained_snapshot

M = Marker


@pytest.mark.parametrize(
    "marks, expected",
    [
        # far apart: each its own label
        ([M(10, "hold", "H"), M(60, "resume", "R")], [MarkerLabel(10, "hold", "H"), MarkerLabel(60, "resume", "R")]),
        # a second apart on a 120 s axis of 66 cells: one label, at the first line
        ([M(50, "resume", "R"), M(51, "mark", "M1")], [MarkerLabel(50, "resume", "R,M1")]),
        # at the same time, whatever order they come in
        ([M(51, "mark", "M2"), M(50, "mark", "M1")], [MarkerLabel(50, "mark", "M1,M2")]),
        # a chain: the merged label is longer, and the next one is measured from its end
        (
            [M(40, "hold", "H"), M(41, "mark", "M1"), M(43, "mark", "M2"), M(60, "knee", "K")],
            [MarkerLabel(40, "hold", "H,M1,M2"), MarkerLabel(60, "knee", "K")],
        ),
        # just clear of the previous label (its end plus one free cell): kept apart
        (
            [M(0, "mark", "M1"), M(120 * 3.5 / 66, "mark", "M2")],
            [MarkerLabel(0, "mark", "M1"), MarkerLabel(120 * 3.5 / 66, "mark", "M2")],
        ),
        ([M(0, "mark", "M1"), M(120 * 2.5 / 66, "mark", "M2")], [MarkerLabel(0, "mark", "M1,M2")]),
    ],
)
def test_marker_labels_never_overlap(marks, expected):
    assert marker_labels(marks, 0.0, 120.0, 66) == expected


def screen_lines(app) -> list[str]:
    update = app.screen._compositor.render_full_update()
    return ["".join(segment.text for segment in strip) for strip in update.strips]


def with_events(snapshot, *events: Event):
    return dataclasses.replace(snapshot, events=sorted([*snapshot.events, *events], key=lambda e: e.t))


@pytest.mark.slow
async def test_two_marks_a_second_apart_are_one_label_on_the_chart():
    snapshot = with_events(fake_snapshot(95.0), Event(89.0, "mark", "second mark"))  # M1 is at 88 s
    app = make_live_app(FrozenSource(snapshot), FakeControl())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = "\n".join(screen_lines(app))
        assert "M1,M2" in text
        assert "M1M2" not in text and "MM" not in text


@pytest.mark.slow
async def test_at_80x24_the_header_keeps_in_flight_and_eta_and_the_footer_every_key_whole():
    app = make_live_app(FrozenSource(explained_snapshot()), FakeControl(), recording="runs/chat.rwrec")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        lines = screen_lines(app)
        header = "\n".join(lines[:2])
        for item in ("RAMPING", "01:35 / 02:00", "left 00:25", "ETA ", "target 15.7 req/s", "in flight 57"):
            assert item in header
        # the knee banner wraps rather than cuts what to try next
        assert "try --max-num-seqs 64" in "".join(lines[2:5])
        footer = lines[-1]
        for key in ("? help", "q quit", "space hold", "+ - rate", "m mark", "s stop", "x cancel", "R restart"):
            assert key in footer, footer
