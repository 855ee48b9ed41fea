"""The events panel: one row per event; long messages wrap under the message column."""

import pytest
from rich.console import Console

from rampwatch.core.timeline import Event
from rampwatch.tui.app import make_live_app
from rampwatch.tui.event_log import EventLog, event_table
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot

EVENTS = [
    Event(t=0.0, kind="start", message="run started: chat against http://127.0.0.1:37481"),
    Event(t=45.0, kind="mark", message="steady before the knee"),
    Event(t=68.0, kind="knee", message="server stopped keeping up at ~10.0 req/s offered"),
    Event(t=70.0, kind="scrape_error", message="GET http://127.0.0.1:37481/metrics: timed out"),
]


def rendered_lines(renderable, width: int) -> list[str]:
    console = Console(width=width, color_system=None, record=True)
    console.print(renderable)
    return console.export_text().rstrip("\n").split("\n")


@pytest.mark.parametrize("width", [36, 50, 80])
def test_long_messages_wrap_under_the_message_column(width):
    lines = rendered_lines(event_table(EVENTS), width)
    assert all(len(line.rstrip()) <= width for line in lines)
    message_column = lines[0].index("run started")
    rows = [line for line in lines if line[:5].strip()]
    assert [row[:5] for row in rows] == ["00:00", "00:45", "01:08", "01:10"]
    for line in lines:
        if not line[:5].strip():  # a continuation: indented to the message column
            assert line[:message_column].strip() == ""
            assert line[message_column] != " "
    # Every character of every message is shown, in order (only the line breaks differ).
    shown = "".join(line[message_column:] for line in lines).replace(" ", "")
    assert shown == "".join(e.message for e in EVENTS).replace(" ", "")


def test_a_wide_panel_keeps_one_line_per_event():
    lines = rendered_lines(event_table(EVENTS), 120)
    assert len(lines) == len(EVENTS)
    assert "server stopped keeping up at ~10.0 req/s offered" in lines[2]


def test_kind_column_is_as_wide_as_the_longest_kind_shown():
    short = rendered_lines(event_table(EVENTS[:3]), 60)
    assert short[0].index("run started") == len("00:00 start ")


def screen_lines(app) -> list[str]:
    update = app.screen._compositor.render_full_update()
    return ["".join(segment.text for segment in strip) for strip in update.strips]


async def test_events_panel_rows_stay_inside_its_border():
    snapshot = fake_snapshot(95.0)
    snapshot.events[:] = EVENTS
    app = make_live_app(FrozenSource(snapshot), FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        log = app.query_one("#w-events", EventLog)
        region = log.region
        lines = screen_lines(app)
        for y in range(region.y + 1, region.bottom - 1):
            row = lines[y][region.x : region.right]
            assert row[0] == "│" and row[-1] == "│", row
        inside = [lines[y][region.x + 2 : region.right - 2] for y in range(region.y + 1, region.bottom - 1)]
        assert inside[0].startswith("00:00 start")
        # The knee's message wraps under the message column, not under the time.
        knee = next(i for i, row in enumerate(inside) if row.startswith("01:08 knee"))
        assert inside[knee + 1].startswith(" " * len("00:00 "))
