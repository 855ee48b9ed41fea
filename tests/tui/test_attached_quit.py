"""`q` on a screen attached to a run in another process (`rampwatch attach`): detach
(the run goes on) or stop the run."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from rampwatch.tui.app import make_live_app
from rampwatch.tui.quit_dialog import DetachDialog
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.settle import charts_settled

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

SIZE = (100, 30)


def attached_app(t=60.0):
    control = FakeControl()
    app = make_live_app(FrozenSource(fake_snapshot(t)), control, attached="abcd0000")
    return app, control


@pytest.mark.parametrize(
    ("keys", "calls", "result"),
    [("d", [], "detach"), ("enter", [], "detach"), ("s", [("stop", None)], "stop")],
)
async def test_q_offers_detach_or_stop(keys, calls, result):
    app, control = attached_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        assert isinstance(app.screen, DetachDialog)
        text = " ".join(str(w.render()) for w in app.screen.query(Static))
        assert "Attached to run abcd0000." in text
        assert "Detach: the run goes on (rampwatch attach abcd0000 watches it again)." in text
        await pilot.press(keys)
        await pilot.pause()
    assert control.calls == calls
    assert app.return_code == 0 and app.return_value == result


async def test_escape_goes_back_and_ctrl_c_twice_detaches():
    app, control = attached_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.press("escape")
        assert not isinstance(app.screen, DetachDialog) and app.is_running
        await pilot.press("ctrl+c")
        assert isinstance(app.screen, DetachDialog)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert control.calls == []  # leaving never stops the run unasked
    assert app.return_code == 0


async def test_a_finished_run_quits_at_once():
    app, control = attached_app(120.0)  # done
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not isinstance(app.screen, DetachDialog)
    assert control.calls == [] and app.return_code == 0


def test_the_detach_dialog_80x24(snap_compare):
    app = make_live_app(
        FrozenSource(fake_snapshot(60.0)), FakeControl(), recording="runs/chat.rwrec", attached="abcd0000"
    )
    assert snap_compare(app, terminal_size=(80, 24), press=["q"], run_before=charts_settled)
