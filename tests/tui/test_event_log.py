"""The events panel: a fixed-column log (time, kind, message cut with an ellipsis), one
line per distinct /metrics failure with its count, and a detail view with the whole text."""

import pytest
from rich.console import Console

from rampwatch.core.timeline import Event, ScrapeErrorLine
from rampwatch.tui.app import make_live_app
from rampwatch.tui.event_log import KIND_WIDTH, EventDetail, EventLog, event_line, event_rows
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot

LONG_URL = "http://very-long-hostname.inference.example.internal:37481/v1/some/deep/path/metrics"
EVENTS = [
    Event(t=0.0, kind="start", message="run started: chat against http://127.0.0.1:37481"),
    Event(t=45.0, kind="mark", message="steady before the knee"),
    Event(t=68.0, kind="knee", message="server stopped keeping up at ~10.0 req/s offered"),
    Event(t=69.0, kind="set_rate", message="rate 10.0 → 11.0 rps"),
    Event(t=70.0, kind="scrape_error", message=f"{LONG_URL}: timeout after 2 s"),
]


def rendered(renderable, width: int) -> list[str]:
    console = Console(width=width, color_system=None)
    lines = console.render_lines(renderable, console.options.update(width=width), pad=False)
    return ["".join(segment.text for segment in line) for line in lines]


def snapshot_with(events, scrape_errors=()):
    snapshot = fake_snapshot(95.0)
    snapshot.events[:] = events
    snapshot.scrape_errors[:] = list(scrape_errors)
    return snapshot


@pytest.mark.parametrize("width", [30, 40, 80])
def test_every_event_is_one_line_in_fixed_columns(width):
    rows = event_rows(snapshot_with(EVENTS))
    lines = [rendered(event_line(row), width) for row in rows]
    assert all(len(line) == 1 for line in lines)  # never wraps
    lines = [line[0] for line in lines]
    assert all(len(line) <= width for line in lines)
    message_column = len("00:00 ") + KIND_WIDTH + 1
    assert [line[:message_column] for line in lines] == [
        "00:00 start  ",
        "00:45 mark   ",
        "01:08 knee   ",
        "01:09 rate   ",
        "01:10 scrape ",
    ]
    for line, event in zip(lines, EVENTS):
        message = line[message_column:]
        if len(event.message) > width - message_column:
            assert message.endswith("…") and event.message.startswith(message[:-1])
        else:
            assert message == event.message


def test_a_message_with_newlines_stays_on_one_line_and_whole_in_the_detail():
    event = Event(3.0, "error", "Cannot connect to host\n  [Connect call failed]\n", {"error_class": "connect"})
    (row,) = event_rows(snapshot_with([event]))
    assert row.message == "Cannot connect to host [Connect call failed]"
    assert "Cannot connect to host\n  [Connect call failed]" in row.detail
    assert "error_class: connect" in row.detail


def test_scrape_failures_are_one_line_per_distinct_error_with_a_count():
    url = "http://127.0.0.1:8000/metrics"
    lines = [
        ScrapeErrorLine(url, "timeout after 2 s", 1, 12.0, 12.0),
        ScrapeErrorLine(url, "connection refused", 42, 60.0, 101.0),
    ]
    # The per-failure events (recordings before the collapse have one a second) give way.
    events = [Event(60.0 + i, "scrape_error", f"{url}: connection refused") for i in range(42)]
    rows = event_rows(snapshot_with([EVENTS[0], *events], lines))
    assert [(row.kind, row.message) for row in rows] == [
        ("start", EVENTS[0].message),
        ("scrape_error", f"timeout after 2 s — {url}"),
        ("scrape_error", f"connection refused ×42 since 01:00 — {url}"),
    ]
    assert rows[-1].t == 101.0  # placed at its last occurrence: the newest line
    assert "failed scrapes: 42" in rows[-1].detail


def test_without_scrape_counts_the_scrape_events_are_shown():
    rows = event_rows(snapshot_with(EVENTS))
    assert [row.kind for row in rows].count("scrape_error") == 1


def screen_lines(app) -> list[str]:
    update = app.screen._compositor.render_full_update()
    return ["".join(segment.text for segment in strip) for strip in update.strips]


@pytest.mark.slow
async def test_events_panel_rows_stay_inside_its_border_and_clear_of_the_scrollbar():
    # Enough events to scroll: the scrollbar has its own column, never over the text.
    many = [Event(float(i), "info", f"event number {i} " + "x" * 80) for i in range(60)]
    snapshot = snapshot_with([*EVENTS, *many])
    app = make_live_app(FrozenSource(snapshot), FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        log = app.query_one("#w-events", EventLog)
        region = log.region
        lines = screen_lines(app)
        inside = []
        for y in range(region.y + 1, region.bottom - 1):
            row = lines[y][region.x : region.right]
            assert row[0] == "│" and row[-1] == "│", row
            inside.append(row[2:-2])
        text_rows = [row for row in inside if row[:2].isdigit()]
        assert len(text_rows) == len(inside)  # one line per event, no wrapped continuation
        # Each line ends in an ellipsis one column short of the scrollbar's column.
        long_rows = [row for row in text_rows if "event number" in row]
        assert long_rows and all(row[-2] == "…" and row[-1] == " " for row in long_rows), long_rows
        assert inside[-1].startswith("01:10 scrape")  # follows the newest


@pytest.mark.slow
async def test_enter_on_a_selected_event_shows_its_whole_text():
    snapshot = snapshot_with(EVENTS)
    app = make_live_app(FrozenSource(snapshot), FakeControl())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("7")  # the events tab takes the keys as it comes into view
        await pilot.pause()
        await pilot.press("up", "enter")  # the newest is selected; up: the one before
        await pilot.pause()
        assert isinstance(app.screen, EventDetail)
        assert app.screen.row.message == EVENTS[3].message
        text = "\n".join(screen_lines(app))
        assert "rate 10.0 → 11.0 rps" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, EventDetail)


@pytest.mark.slow
async def test_the_errors_summary_is_one_line_too():
    snapshot = snapshot_with(EVENTS)
    snapshot.summary["errors_by_class"] = {f"http_{500 + i}": 10 + i for i in range(8)}
    app = make_live_app(FrozenSource(snapshot), FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        region = app.query_one("#w-events", EventLog).region
        lines = screen_lines(app)
        first, second = (lines[y][region.x + 2 : region.right - 2] for y in (region.y + 1, region.y + 2))
        assert first.startswith("errors: http_500 ×10") and first.rstrip().endswith("…")
        assert second.startswith("00:00 start")


class GrowingSource:
    """A snapshot whose events grow when the test says so."""

    def __init__(self, events):
        self.current = snapshot_with(list(events))

    def add(self, event):
        self.current = snapshot_with([*self.current.events, event])

    def snapshot(self):
        return self.current


@pytest.mark.slow
async def test_the_newest_event_stays_selected_unless_the_user_moved_up():
    source = GrowingSource(EVENTS)
    app = make_live_app(source, FakeControl())
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        lines = app.query_one("#w-events EventList")
        assert lines.highlighted == len(EVENTS) - 1
        source.add(Event(80.0, "mark", "first new"))
        app.poll_source()
        await pilot.pause()
        assert lines.highlighted == len(EVENTS)  # followed the newest
        await pilot.press("up", "up")
        source.add(Event(90.0, "mark", "second new"))
        app.poll_source()
        await pilot.pause()
        assert lines.highlighted == len(EVENTS) - 2  # stayed where the user put it
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen.row.message == EVENTS[-2].message
