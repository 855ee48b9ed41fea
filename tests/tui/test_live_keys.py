"""Every live key either acts (and the run records it) or is disabled with a visible
reason; a steering toast says what the run recorded; ctrl+c and ctrl+q go through the
quit flow."""

import asyncio
import dataclasses

import pytest

from rampwatch.tui import steering
from rampwatch.tui.app import make_live_app
from rampwatch.tui.mark_dialog import MarkDialog
from rampwatch.tui.quit_dialog import QuitDialog
from rampwatch.tui.steering import ACTION_STATES, why_unavailable
from tests.tui.fakes import FakeControl, SteeredFake, fake_snapshot

SIZE = (120, 40)
LIVE_KEYS = {
    "space": "toggle_hold",
    "plus": "rate_up",
    "minus": "rate_down",
    "m": "mark",
    "s": "stop_run",
    "x": "end_drain",
    "R": "restart_server",
}


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def shown_toasts(pilot, app, at_least: int = 1, timeout_s: float = 5.0) -> list[str]:
    """The toasts once ``at_least`` are shown: ``App.notify`` posts a message the app
    handles later, which on a busy machine can be after the next pause."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(toasts(app)) < at_least and loop.time() < deadline:
        await pilot.pause(0.02)
    return toasts(app)


def steered(t: float = 60.0, state: str | None = None, rate_step_rps: float | None = None, **changes):
    snapshot = fake_snapshot(t, state=state)
    fake = SteeredFake(dataclasses.replace(snapshot, **changes))
    return make_live_app(fake, fake, rate_step_rps=rate_step_rps), fake


@pytest.mark.parametrize(
    "action, state, reason",
    [
        ("toggle_hold", "ramping", None),
        ("toggle_hold", "holding", None),
        ("toggle_hold", "draining", "the schedule is over: the run is only waiting for its in-flight requests"),
        ("rate_up", "stopping", "the run is stopping"),
        ("rate_down", "starting", "the run has not started yet"),
        ("toggle_hold", "done", "the run has finished"),
        ("mark", "draining", None),
        ("mark", "done", "the run has finished and its recording is closed"),
        ("stop_run", "draining", None),
        ("stop_run", "stopping", "already stopping: in-flight requests have the grace period (x cancels them now)"),
        ("end_drain", "stopping", None),
        ("end_drain", "ramping", "nothing to cancel: x ends the drain once the schedule is over or stopped"),
        ("end_drain", "done", "the run has finished"),
    ],
)
def test_why_a_key_cannot_act(action, state, reason):
    assert why_unavailable(action, state) == reason


def test_every_live_action_has_a_key_and_states():
    assert set(LIVE_KEYS.values()) == set(ACTION_STATES)


@pytest.mark.slow
async def test_after_done_every_live_key_is_dimmed_and_says_why_and_nothing_is_recorded():
    app, fake = steered(120.0)  # done
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        for key in LIVE_KEYS:
            binding = app.active_bindings.get(key)
            assert binding is not None and not binding.enabled, key  # dimmed in the footer
        for key in LIVE_KEYS:
            await pilot.press(key)
            assert not isinstance(app.screen, MarkDialog)
        await pilot.pause()
        app.poll_source()
        await pilot.pause()
        shown = await shown_toasts(pilot, app, at_least=len(LIVE_KEYS))
    assert fake.calls == []  # nothing reached the run…
    assert fake.snapshot().events == fake.base.events  # …so nothing was recorded
    for key, action in LIVE_KEYS.items():
        assert f"{key}: {why_unavailable(action, 'done')}" in shown


@pytest.mark.slow
async def test_a_hold_toast_shows_the_rate_the_run_recorded():
    app, fake = steered(60.0)  # ramping
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("space")
        app.poll_source()
        await pilot.pause()
        recorded = [e for e in fake.events if e.kind == "hold"][-1]
        assert await shown_toasts(pilot, app) == [recorded.message]
        assert f"{app.latest.target_rps:.3g}" not in recorded.message  # the tick's rate was stale


@pytest.mark.slow
async def test_a_rate_step_toast_shows_the_recorded_rate():
    app, fake = steered(60.0, rate_step_rps=1.0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("plus")
        app.poll_source()
        await pilot.pause()
        recorded = fake.events[-1]
        assert recorded.kind == "set_rate"
        assert await shown_toasts(pilot, app) == [f"rate +1 rps: {recorded.message}"]


class RunningSource:
    """The fake run with its clock moving by ``step`` run seconds at each poll."""

    def __init__(self, t: float, step: float) -> None:
        self.t, self.step = t, step

    def snapshot(self):
        self.t += self.step
        return fake_snapshot(self.t)


@pytest.mark.slow
async def test_a_steering_call_the_run_never_confirms_says_nothing_was_recorded():
    """Counted in run seconds from the first snapshot after the key: a UI that polls
    late (a busy machine) does not call a late confirmation a refusal."""
    control = FakeControl()  # takes the call, records no event
    source = RunningSource(60.0, step=1.0)
    app = make_live_app(source, control, refresh_hz=0.1)  # polled only by hand here
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("m", *"note", "enter")
        for _ in range(int(steering.CONFIRM_TIMEOUT_S) + 1):  # the first snapshot after the key, then 5 s
            app.poll_source()
            await pilot.pause()
        assert toasts(app) == []  # not more than 5 run seconds since the first snapshot
        app.poll_source()
        await pilot.pause()
        assert await shown_toasts(pilot, app) == ["mark: the run did not take it (state ramping); nothing was recorded"]
    assert control.calls == [("mark", "note")]


@pytest.mark.slow
async def test_a_mark_typed_while_the_run_ends_is_not_sent():
    app, fake = steered(60.0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("m", *"late")
        app.latest = dataclasses.replace(app.latest, state="done")  # the run ended meanwhile
        await pilot.press("enter")
        await pilot.pause()
        assert await shown_toasts(pilot, app) == ["mark not added: the run has finished and its recording is closed"]
    assert fake.calls == []


@pytest.mark.slow
async def test_x_ends_the_drain_and_the_toast_is_the_recorded_cancel():
    app, fake = steered(125.0, state="draining", in_flight=37)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        assert app.active_bindings["x"].enabled and not app.active_bindings["space"].enabled
        await pilot.press("x")
        app.poll_source()
        await pilot.pause()
        assert await shown_toasts(pilot, app) == ["ending the drain now: cancelling 37 requests (37 in flight)"]
    assert fake.calls == [("cancel_in_flight", None)]


@pytest.mark.slow
async def test_x_while_ramping_cancels_nothing():
    app, fake = steered(60.0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press("x")
        await pilot.pause()
        assert await shown_toasts(pilot, app) == [f"x: {why_unavailable('end_drain', 'ramping')}"]
    assert fake.calls == []


@pytest.mark.slow
@pytest.mark.parametrize("key", ["ctrl+c", "ctrl+q"])
async def test_ctrl_c_and_ctrl_q_ask_while_the_run_is_active_and_n_keeps_it(key):
    app, fake = steered(60.0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.press(key)
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("n")
        assert not isinstance(app.screen, QuitDialog) and app.is_running
        assert toasts(app) == []  # not Textual's "Press ctrl+q to quit" hint
    assert fake.calls == []


@pytest.mark.slow
@pytest.mark.parametrize("key", ["ctrl+c", "ctrl+q"])
async def test_a_second_ctrl_c_confirms_the_quit(key):
    app, fake = steered(60.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(key, key)
        await pilot.pause()
    assert fake.calls == [("stop", None)]
    assert app.return_code == 0


@pytest.mark.slow
async def test_ctrl_c_quits_at_once_when_the_run_is_done():
    app, fake = steered(120.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert not isinstance(app.screen, QuitDialog)
    assert fake.calls == []
    assert app.return_code == 0


@pytest.mark.slow
async def test_c_toggles_mouse_capture_on_a_driver_that_has_it():
    app, _ = steered(60.0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        driver = app._driver
        calls = []
        driver._enable_mouse_support = lambda: calls.append("on")
        driver._disable_mouse_support = lambda: calls.append("off")
        await pilot.press("c")
        assert app.mouse_reporting is False and driver._mouse is False
        await pilot.press("c")
        assert app.mouse_reporting is True and driver._mouse is True
    assert calls == ["off", "on"]


@pytest.mark.parametrize("flags, mouse", [([], True), (["--no-mouse"], False)])
def test_no_mouse_starts_the_live_screen_without_mouse_capture(monkeypatch, flags, mouse):
    import argparse

    from rampwatch.app import live
    from rampwatch.app.run_config import RunConfig

    parser = argparse.ArgumentParser()
    RunConfig.add_cli_args(parser)
    args = parser.parse_args(["chat", *flags])
    seen = {}

    class Prepared:
        run = type("R", (), {"options": type("O", (), {"stop_grace_s": 1.0})()})()
        recording_path = None

        def close(self):
            pass

    class Bridge:
        done = True

        def finish(self, timeout):
            return "result"

    class App:
        def run(self, *, mouse):
            seen["run"] = mouse

    def start(prepared, *, log_path, mouse):
        seen["app"] = mouse
        return Bridge(), App()

    monkeypatch.setattr(live, "plan_run", lambda a: type("Plan", (), {"server": None, "recording_path": None})())
    monkeypatch.setattr(live, "_build", lambda plan: Prepared())
    monkeypatch.setattr(live, "start_live_prepared", start)
    monkeypatch.setattr(live, "finish_run", lambda prepared, result: 0)
    assert live.run_live(RunConfig.from_cli_args(args)) == 0
    assert seen == {"app": mouse, "run": mouse}
