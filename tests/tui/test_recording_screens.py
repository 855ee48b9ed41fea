"""The screens fed from the committed recording fixture (tests/data/small.rwrec, made by
scripts/make_fixture_recording.py): the live screen at 80×24 and 160×48, and the
replay screen. The replay is paused at a fixed position and has no warm-up thread, so
every run draws the same picture."""

from pathlib import Path

import pytest

from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline
from rampwatch.tui.app import make_live_app, make_replay_app
from tests.tui.fakes import FakeControl, FrozenSource
from tests.tui.settle import charts_settled

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "small.rwrec"
AT = 55.0  # past the mark (30 s) and the knee (~48 s)


@pytest.fixture
def timeline():
    recording = open_recording(FIXTURE)
    tl = ReplayTimeline(recording, warm_up=False)
    tl.seek(AT)
    yield tl
    recording.close()


def live_app(timeline):
    return make_live_app(FrozenSource(timeline.snapshot()), FakeControl(), recording="tests/data/small.rwrec")


def test_recorded_run_live_80x24(snap_compare, timeline):
    assert snap_compare(live_app(timeline), terminal_size=(80, 24), run_before=charts_settled)


def test_recorded_run_live_160x48(snap_compare, timeline):
    assert snap_compare(live_app(timeline), terminal_size=(160, 48), run_before=charts_settled)


def test_recorded_run_replay_160x48(snap_compare, timeline):
    app = make_replay_app(timeline, recording="tests/data/small.rwrec")
    assert snap_compare(app, terminal_size=(160, 48), run_before=charts_settled)


def test_recorded_run_replay_compare_120x40(snap_compare, timeline):
    other = ReplayTimeline(open_recording(FIXTURE), warm_up=False)
    other.seek(other.duration)
    compare = FrozenSource(other.snapshot())
    app = make_replay_app(timeline, compare=compare, recording="a.rwrec", compare_label="b.rwrec")
    assert snap_compare(app, terminal_size=(120, 40), run_before=charts_settled)


async def test_replay_keys_move_the_recording(timeline):
    app = make_replay_app(timeline)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("home")
        assert timeline.position == 0.0
        await pilot.press("k")
        assert timeline.position == pytest.approx(48.05)
        await pilot.press("p")
        assert timeline.position == pytest.approx(30.0)
        await pilot.press("right")
        assert timeline.position == pytest.approx(40.0)
        await pilot.press("end")
        assert timeline.position == pytest.approx(timeline.duration)
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert timeline.speed == 4.0
        await pilot.press("home", "space")
        await pilot.pause(0.5)
        assert timeline.playing and timeline.position > 0.0
        await pilot.press("space")
        assert not timeline.playing
        assert app.latest.header.scenario_name == "fixture-ramp"
