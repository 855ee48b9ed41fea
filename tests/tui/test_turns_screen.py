"""`u`: the figures by turn of a session workload, live (the open screen follows the run)
and in replay; the snapshot of a multi-turn run shows TTFT and the hit rate by turn."""

from __future__ import annotations

import dataclasses

import pytest
from rich.console import Console

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import RunHeader
from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline
from rampwatch.record.writer import RecordingWriter
from rampwatch.tui.app import make_live_app, make_replay_app
from rampwatch.tui.turns_screen import TurnsScreen, bar, sessions_text, turns_renderable
from tests.core.figures.session_records import session_records, session_stream
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.settle import charts_settled


@pytest.mark.parametrize(
    ("fraction", "width", "expected"),
    [(None, 10, ""), (0.0, 10, ""), (1.0, 4, "████"), (0.5, 4, "██"), (0.55, 4, "██▎"), (2.0, 3, "███"), (-1, 3, "")],
)
def test_bars_in_eighths_of_a_cell(fraction, width, expected):
    assert bar(fraction, width) == expected


def multi_turn_snapshot(t: float = 95.0, *, session_series: bool = True):
    """The fake run's screen with the turns of a multi-turn workload folded by the real
    series builder (three sessions ended by an error), and its session series."""
    builder = SeriesBuilder()
    records = session_records(sessions=40, turns=6, start_every_s=0.5, fail={3: 2, 17: 4, 29: 6})
    for kind, item in session_stream(records):
        getattr(builder, f"on_{kind}")(item)
    snapshot = fake_snapshot(t)
    series = dict(snapshot.series)
    if session_series:
        n = len(snapshot.times)
        series.update(sessions_active=[12.0] * n, sessions_started_per_s=[2.0] * n, sessions_finished_per_s=[1.8] * n)
    return dataclasses.replace(snapshot, series=series, turns=builder.snapshot().turns)


def text_of(renderable, width=100) -> str:
    console = Console(width=width, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_table_has_a_row_per_turn_with_bars_for_ttft_and_hit_rate():
    text = text_of(turns_renderable(multi_turn_snapshot().turns)).splitlines()
    assert text[0].split()[:4] == ["turn", "requests", "errors", "TTFT"]
    first, second = text[1].split(), text[2].split()
    assert first[:3] == ["1", "40", "0"]
    assert float(first[3]) == pytest.approx(200.0, rel=0.01)  # live figures: within a 1% bucket
    assert "█" * 14 in text[1]  # the slowest turn fills its bar
    assert second[1:3] == ["40", "1"] and second[-2:] == ["50.0", "█████"]
    assert len(text) == 7  # six turns under the heading


def test_the_sessions_line_has_the_session_series_when_the_run_has_them():
    with_series = sessions_text(multi_turn_snapshot(), multi_turn_snapshot().turns)
    assert with_series == (
        "sessions 40 · ended by an error 3 · no error 37 · active 12 · mean turns 5.85\n"
        "sessions/s: started 2.00 · finished 1.80"
    )
    without = multi_turn_snapshot(session_series=False)
    assert sessions_text(without, without.turns) == "sessions 40 · ended by an error 3 · no error 37 · mean turns 5.85"


async def first_snapshot(pilot) -> None:
    """Wait for the app's first poll of its source (keys act on the latest snapshot)."""
    for _ in range(200):
        if pilot.app.latest.header is not None:
            return
        await pilot.pause(0.02)
    raise AssertionError("no snapshot came")


@pytest.mark.slow
async def test_u_says_why_when_the_run_has_no_sessions():
    app = make_live_app(FrozenSource(fake_snapshot(60.0)), FakeControl())
    async with app.run_test(size=(100, 30)) as pilot:
        await first_snapshot(pilot)
        await pilot.press("u")
        await pilot.pause()
        assert not isinstance(app.screen, TurnsScreen)
        assert any("session workloads" in n.message for n in app._notifications)


@pytest.mark.slow
async def test_u_opens_and_closes_the_turns_and_follows_the_run():
    source = FrozenSource(multi_turn_snapshot())
    app = make_live_app(source, FakeControl())
    async with app.run_test(size=(100, 30)) as pilot:
        await first_snapshot(pilot)
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, TurnsScreen)
        later = multi_turn_snapshot(100.0)
        later = dataclasses.replace(later, turns=dataclasses.replace(later.turns, rows=later.turns.rows[:2]))
        source._snapshot = later
        for _ in range(40):  # the app polls its source (4 Hz)
            await pilot.pause(0.05)
            if app.screen.snapshot is later:
                break
        assert app.screen.snapshot is later
        await pilot.press("u")
        await pilot.pause()
        assert not isinstance(app.screen, TurnsScreen)


@pytest.fixture(scope="module")
def session_recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("turns") / "multi-turn.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    writer.on_start(RunHeader("0", 0.0, "http://x", "m", "multi-turn-chat"))
    stream = session_stream(session_records(sessions=10, turns=3, cached=False))
    for kind, item in stream:
        getattr(writer, f"on_{kind}")(item)
    writer.on_finish(stream[-1][1].t)
    writer.close()
    return path


@pytest.mark.slow
async def test_the_replay_of_a_session_recording_shows_the_turns(session_recording):
    recording = open_recording(session_recording)
    timeline = ReplayTimeline(recording, warm_up=False)
    timeline.seek(timeline.duration)
    app = make_replay_app(timeline, recording=str(session_recording))
    async with app.run_test(size=(120, 40)) as pilot:
        await first_snapshot(pilot)
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, TurnsScreen)
        rows = app.screen.snapshot.turns.rows
        assert [r.requests for r in rows] == [10, 10, 10]
        hint = str(app.screen.query_one("#turns-hint").render())
        assert "--enable-prompt-tokens-details" in hint  # the recording has no cached tokens
    recording.close()


@pytest.mark.slow
def test_turns_of_a_multi_turn_run_100x30(snap_compare):
    app = make_live_app(FrozenSource(multi_turn_snapshot()), FakeControl(), recording="runs/multi-turn-chat.rwrec")
    assert snap_compare(app, terminal_size=(100, 30), press=["u"], run_before=charts_settled)
