"""The live screen steering a real run against the simulator: the keys change the
schedule, and the recording holds every action as an event.

Two wirings: the run on the app's own event loop (so the test can read the schedule
directly after each key), and the production one — `rampwatch run`'s ``prepare_run``
with the embedded simulator, the run forked into its own process — checked through the
published snapshots and the recording."""

from __future__ import annotations

import argparse
import asyncio
import io
import time

import pytest

from rampwatch.app import session
from rampwatch.app.live import start_live_prepared
from rampwatch.app.run_config import RunConfig
from rampwatch.app.session import serving_sim
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from rampwatch.sim.config import SimConfig
from rampwatch.tui.app import make_live_app
from rampwatch.tui.mark_dialog import MarkDialog
from rampwatch.tui.quit_dialog import QuitDialog

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

# A ramp far longer than the test, slow enough that a 1 rps step is unmistakable, with
# short answers so requests finish quickly on the instant simulator.
RAMP = {"duration": 60.0, "start_rps": 4.0, "end_rps": 10.0, "seed": 1}
SHORT_ANSWERS = [("workload.output_tokens", "8"), ("workload.input_tokens", "20")]
STEP = 1.0
NOTE = "raised max-num-seqs"
WAIT_S = 15.0


@pytest.fixture(scope="module")
def sim():
    with serving_sim(SimConfig(hardware="instant", model="tiny", seed=1)) as server:
        yield server


async def wait_for(pilot, condition, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def recorded_events(path):
    with open_recording(path) as recording:
        return list(recording.events)


def check_recorded_steering(events, held_rate: float | None = None) -> None:
    kinds = [e.kind for e in events]
    steering = [e for e in events if e.kind in ("hold", "set_rate", "resume", "mark")]
    assert [e.kind for e in steering] == ["hold", "set_rate", "set_rate", "resume", "mark"], kinds
    hold, up, down, resume, mark = steering
    assert up.data["delta_rps"] == STEP and down.data["delta_rps"] == -STEP
    assert up.data["after_rps"] == pytest.approx(up.data["before_rps"] + STEP)
    assert down.data["after_rps"] == pytest.approx(up.data["after_rps"] - STEP)
    if held_rate is not None:
        assert hold.data["after_rps"] == pytest.approx(held_rate)
        assert up.data["after_rps"] == pytest.approx(held_rate + STEP)
    assert hold.t <= up.t <= down.t <= resume.t <= mark.t
    assert mark.data["note"] == NOTE and NOTE in mark.message
    stops = [e for e in events if e.kind == "stop"]
    assert stops and stops[0].t >= mark.t and "stop requested" in stops[0].message


async def test_keys_steer_a_run_on_the_apps_loop_and_are_recorded(sim, tmp_path):
    scenario = load_scenario("chat", overrides=SHORT_ANSWERS, flags=RAMP)
    model, _ = session.discover_model(sim.url, Connection())
    path = tmp_path / "same-loop.rwrec"
    run = Run(
        scenario,
        RunOptions(target=sim.url, model=model, rate_step_rps=STEP, stop_grace_s=5.0, keep_records=True),
        sinks=[RecordingWriter(path)],
    )
    schedule = run.schedule
    app = make_live_app(run, run, rate_step_rps=STEP)  # the Run is both the source and the control
    execution: asyncio.Task | None = None
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            execution = asyncio.create_task(run.execute())
            await wait_for(pilot, lambda: app.latest.header is not None and run.now() > 1.0, "the run to start")

            await pilot.press("space")
            await wait_for(pilot, lambda: schedule.state == "holding", "the hold")
            held = schedule.current_rate(run.now())
            assert RAMP["start_rps"] <= held < RAMP["end_rps"]
            await pilot.pause(0.3)
            assert schedule.current_rate(run.now()) == held  # the ramp is frozen

            await pilot.press("plus")
            await wait_for(pilot, lambda: schedule.current_rate(run.now()) == pytest.approx(held + STEP), "+ step")
            await pilot.press("minus")
            await wait_for(pilot, lambda: schedule.current_rate(run.now()) == pytest.approx(held), "- step")
            assert schedule.state == "holding"

            await pilot.press("space")
            await wait_for(pilot, lambda: schedule.state == "ramping", "the resume")

            await pilot.press("m")
            assert isinstance(app.screen, MarkDialog)
            await pilot.press(*NOTE, "enter")
            await wait_for(pilot, lambda: any(e.kind == "mark" for e in run.collector.events), "the mark")
            # the toast confirms what the run recorded, once its event is in a snapshot
            await wait_for(pilot, lambda: any("M1 recorded at" in t and NOTE in t for t in toasts(app)), "toast")

            await pilot.press("s")
            await wait_for(pilot, execution.done, "the run to drain and finish")
            await wait_for(pilot, lambda: app.latest.state == "done", "the done snapshot")
            recorded = len(run.collector.events)
            await pilot.press("space", "plus", "m", "s", "x")  # after the end: disabled, each says why
            await pilot.pause(0.3)
            assert not isinstance(app.screen, MarkDialog)
            assert sum(": the run has finished" in t for t in toasts(app)) == 5
            assert len(run.collector.events) == recorded  # nothing more was recorded
            await pilot.press("q")  # a finished run quits without asking
        result = await execution
    finally:
        if execution is not None and not execution.done():
            run.stop()
            await asyncio.wait_for(execution, 10.0)
    assert result.requests and all(r.ok for r in result.requests)
    check_recorded_steering(recorded_events(path), held)


def toasts(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


def run_args(tmp_path, *extra: str) -> RunConfig:
    parser = argparse.ArgumentParser()
    RunConfig.add_cli_args(parser)
    sets = [f"--set={key}={value}" for key, value in SHORT_ANSWERS]
    return RunConfig.from_cli_args(
        parser.parse_args(
            [
                "chat",
                "--duration",
                str(RAMP["duration"]),
                "--start-rps",
                str(RAMP["start_rps"]),
                "--end-rps",
                str(RAMP["end_rps"]),
                "--seed",
                "1",
                "--rate-step",
                str(STEP),
                "--stop-grace",
                "5",
                "--sim-hardware",
                "instant",
                "--sim-model",
                "tiny",
                "--record",
                str(tmp_path / "process.rwrec"),
                *sets,
                *extra,
            ]
        )
    )


async def test_keys_steer_the_run_process_of_rampwatch_run(tmp_path):
    """`rampwatch run`'s own wiring: prepare_run with the embedded simulator, the run
    forked into its own process, the recording finished there."""
    prepared = session.prepare_run(run_args(tmp_path))
    try:
        bridge, app = start_live_prepared(prepared, ui_priority="normal")
        try:
            async with app.run_test(size=(100, 30)) as pilot:
                await wait_for(pilot, lambda: app.latest.state == "ramping" and app.latest.t > 1.0, "the run to start")
                await pilot.press("space")
                await wait_for(pilot, lambda: app.latest.state == "holding", "the hold to reach a tick")
                held = app.latest.target_rps
                await pilot.press("plus")
                await wait_for(pilot, lambda: app.latest.target_rps == pytest.approx(held + STEP), "+ step")
                await pilot.press("minus")
                await wait_for(pilot, lambda: app.latest.target_rps == pytest.approx(held), "- step")
                await pilot.press("space")
                await wait_for(pilot, lambda: app.latest.state == "ramping", "the resume")
                await pilot.press("m", *NOTE, "enter")
                await wait_for(pilot, lambda: any(e.kind == "mark" for e in app.latest.events), "the mark")
                await pilot.press("q")
                assert isinstance(app.screen, QuitDialog)  # the run is active: ask first
                await pilot.press("y")  # stop gracefully and leave
            result = bridge.finish(drain_timeout=15.0)
        finally:
            bridge.finish(drain_timeout=15.0)
    finally:
        prepared.close()
    assert app.return_code == 0
    # the run process sent back counts, not records (those are in the recording)
    assert result.requests == [] and result.counts.ended > 0 and result.counts.failed == 0
    assert result.interrupted  # quit before the schedule's end
    out = io.StringIO()
    assert session.finish_run(prepared, result, out=out) == session.INTERRUPTED_EXIT
    assert f"recording: {prepared.recording_path}" in out.getvalue()
    check_recorded_steering(recorded_events(prepared.recording_path))


async def test_x_ends_the_drain_of_the_run_process_and_it_is_recorded(tmp_path, capsys):
    """A schedule that ends while slow requests are still streaming: the screen shows the
    drain (in flight, oldest age), x cancels them through the pipe, the recording holds
    the cancel event and the cancelled requests, and the summary counts them as
    cancelled, not failed."""
    args = run_args(
        tmp_path,
        "--duration",
        "2",
        "--stop-grace",
        "60",
        "--sim-hardware",
        "l4",
        "--sim-model",
        "llama-3.1-8b-fp8",
        "--set",
        "workload.output_tokens=3000",
    )
    prepared = session.prepare_run(args)
    try:
        bridge, app = start_live_prepared(prepared, ui_priority="normal")
        try:
            async with app.run_test(size=(160, 48), notifications=True) as pilot:
                await wait_for(pilot, lambda: app.latest.state == "draining", "the drain", timeout=30.0)
                await wait_for(pilot, lambda: app.latest.oldest_in_flight_sent_at is not None, "a drain tick")
                header = app.query_one("#header").render_text(app.latest).plain
                assert f"in flight {app.latest.in_flight}  oldest " in header and "x cancels them now" in header
                await pilot.press("x")
                await wait_for(pilot, lambda: any("ending the drain now" in t for t in toasts(app)), "the toast")
                await wait_for(pilot, lambda: app.latest.state == "done", "the end", timeout=30.0)
                await pilot.press("q")
            result = bridge.finish(drain_timeout=15.0)
        finally:
            bridge.finish(drain_timeout=15.0)
    finally:
        prepared.close()
    with open_recording(prepared.recording_path) as recording:
        cancelled = [r for r in recording.requests if r.error_class == "cancelled"]
    assert cancelled and result.interrupted
    out = io.StringIO()
    assert session.finish_run(prepared, result, out=out) == session.INTERRUPTED_EXIT
    assert f"Cancelled requests:                      {len(cancelled):<10}" in out.getvalue()
    assert "Failed requests:                         0 " in out.getvalue()
    assert "cancelled requests" in capsys.readouterr().err
    events = recorded_events(prepared.recording_path)
    cancels = [e for e in events if e.kind == "cancel"]
    assert len(cancels) == 1 and cancels[0].data["requests"] == len(cancelled)


async def test_a_server_killed_under_the_run_process_fails_the_run_on_screen_and_in_the_recording(tmp_path, capsys):
    """The UI process owns the server; the run is in its forked process: the exit is seen
    here, said on screen, passed down the pipe (the run records it and stops), and the
    run's exit code says the server exited."""
    import os
    import signal

    prepared = session.prepare_run(run_args(tmp_path))
    server = prepared.server
    assert server is not None
    try:
        bridge, app = start_live_prepared(prepared, ui_priority="normal")
        try:
            async with app.run_test(size=(160, 48), notifications=True) as pilot:
                await wait_for(pilot, lambda: app.latest.state == "ramping" and app.latest.t > 1.0, "the run to start")
                os.kill(server.pid, signal.SIGKILL)
                await wait_for(pilot, lambda: app.server_exit_shown, "the exit to be seen")
                # the toast is a message the app handles next (App.notify posts it)
                await wait_for(
                    pilot,
                    lambda: any("server exited with code 137 (SIGKILL) during the run" in t for t in toasts(app)),
                    "the toast",
                )
                assert app.query_one("#server-log").display
                await wait_for(pilot, lambda: app.latest.state == "done", "the run to stop")
                await pilot.press("q")
            result = bridge.finish(drain_timeout=15.0)
        finally:
            bridge.finish(drain_timeout=15.0)
    finally:
        prepared.close()
    assert session.finish_run(prepared, result, out=io.StringIO()) == session.SERVER_EXITED_EXIT
    assert "server exited with code 137 (SIGKILL) during the run" in capsys.readouterr().err
    (error,) = [e for e in recorded_events(prepared.recording_path) if e.kind == "error"]
    assert error.data["server_exit_code"] == 137
