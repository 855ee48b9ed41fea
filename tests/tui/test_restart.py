"""Restarting the run's server from the live screen, end to end on the simulator: the
run forked into its own process as `rampwatch run` does it, the server started by
rampwatch (``ManagedServer``: ``rampwatch sim --max-num-seqs 8``), `R` edits its
arguments, the load pauses and resumes as chosen, the recording holds the mark with the
diff and every request before and after."""

from __future__ import annotations

import threading

import pytest
from textual.widgets import Input, Static

from rampwatch.app.live import start_live
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.server.managed import ManagedServer, ServeCommand, server_log_path
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.record.analysis import configuration_segments
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from rampwatch.tui.configurations_screen import ConfigurationsScreen
from rampwatch.tui.restart_dialog import RestartDialog
from rampwatch.tui.steering import NO_SERVER
from tests.processes import free_port, wait_group_gone
from tests.tui.test_live_run import SHORT_ANSWERS, toasts, wait_for

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

RAMP = {"duration": 60.0, "start_rps": 4.0, "end_rps": 10.0, "seed": 1}


def sim_command(port: int, max_num_seqs: int) -> str:
    return f"rampwatch sim --hardware instant --model tiny --port {port} --max-num-seqs {max_num_seqs}"


def live_run(tmp_path, server: ManagedServer, name: str):
    scenario = load_scenario("chat", overrides=SHORT_ANSWERS, flags=RAMP)
    path = tmp_path / f"{name}.rwrec"
    writer = RecordingWriter(path)
    options = RunOptions(
        target=server.command.base_url,
        model="tiny",
        stop_grace_s=5.0,
        cli_options={"serve": server.command.shown},
        keep_records=True,
    )
    run = Run(scenario, options, sinks=[writer])

    async def execute():
        try:
            return await run.execute()
        finally:
            writer.close()

    return run, execute, path


def hold_new_servers(monkeypatch) -> threading.Event:
    """Servers started from now on wait for the returned event before starting: the
    restart stays under way (RESTARTING) until the test has looked at it, however long
    a loaded machine takes to draw it (the simulator itself restarts in about a second)."""
    release = threading.Event()
    start = ManagedServer.start

    def held_start(self, *args, **kwargs):
        release.wait(60)
        return start(self, *args, **kwargs)

    monkeypatch.setattr(ManagedServer, "start", held_start)
    return release


@pytest.mark.parametrize("resume", ["current", "start"])
async def test_restart_with_other_arguments_from_the_live_screen(tmp_path, resume, monkeypatch):
    port = free_port()
    server = ManagedServer(ServeCommand.parse(sim_command(port, 8)))
    server.start(60)
    new_server_may_start = hold_new_servers(monkeypatch)
    in_service: list[ManagedServer | None] = []
    try:
        run, execute, path = live_run(tmp_path, server, resume)
        bridge, app = start_live(
            execute, run.snapshot, run, ui_priority="normal", server=server, on_server=in_service.append
        )
        try:
            async with app.run_test(size=(140, 40)) as pilot:
                await wait_for(pilot, lambda: app.latest.state == "ramping" and app.latest.t > 2.0, "the run to start")
                await pilot.press("R")
                assert isinstance(app.screen, RestartDialog)
                dialog = app.screen
                assert dialog.query_one(Input).value == server.command.shown
                assert "same arguments" in str(dialog.query_one("#restart-diff", Static).render())
                await pilot.press("end", "backspace", "6", "4")
                assert str(dialog.query_one("#restart-diff", Static).render()) == "changes: --max-num-seqs 8 → 64"
                if resume == "start":
                    await pilot.press("tab")
                assert dialog.resume == resume
                await pilot.press("enter")
                assert not isinstance(app.screen, RestartDialog)
                await wait_for(pilot, lambda: app.latest.state == "restarting", "RESTARTING")
                await wait_for(pilot, lambda: "RESTARTING" in str(app.query_one("#header").render()), "the header")
                await pilot.press("space")  # steering waits for the new server
                await wait_for(pilot, lambda: any("the server is restarting" in t for t in toasts(app)), "why not")
                new_server_may_start.set()
                await wait_for(
                    pilot, lambda: any(e.kind == "config" for e in app.latest.events), "the restart", timeout=60
                )
                config_t = next(e.t for e in app.latest.events if e.kind == "config")
                await wait_for(
                    pilot, lambda: any("server restarted: --max-num-seqs 8 → 64" in t for t in toasts(app)), "toast"
                )
                await wait_for(pilot, lambda: app.latest.state == "ramping" and app.latest.t > config_t + 2, "load")
                await wait_for(pilot, lambda: app.latest.configurations is not None, "the live table")
                await pilot.press("g")
                assert isinstance(app.screen, ConfigurationsScreen)
                assert app.screen.table.rows[0] == ("--max-num-seqs", ["8", "64"])
                await pilot.press("escape")
                await pilot.press("s")
                await wait_for(pilot, lambda: app.latest.state == "done", "the end", timeout=30)
                await pilot.press("q")
            result = bridge.finish(drain_timeout=15.0)
        finally:
            new_server_may_start.set()
            bridge.finish(drain_timeout=15.0)
    finally:
        for each in [server, *in_service]:
            if each is not None:
                each.stop()
    new_server = in_service[-1]
    assert in_service[0] is None and new_server is not None  # the old one was let go first
    for each in (server, new_server):  # no server left behind
        assert each.pid is not None and wait_group_gone(each.pid)
    assert new_server.command.engine_args()["max_num_seqs"] == "64"
    assert server.poll() is not None  # the old server was stopped
    with open_recording(path) as recording:
        events = recording.events
        requests = recording.requests
        segments, summaries = configuration_segments(recording)
    (config,) = [e for e in events if e.kind == "config"]
    assert config.data["diff"] == [["max_num_seqs", "8", "64"]]
    assert config.data["resume"] == resume
    assert config.data["command"] == sim_command(port, 64)
    paused = next(e for e in events if e.kind == "set_rate" and e.data.get("restart"))
    assert config.data["restart_started_at"] == pytest.approx(paused.t, abs=0.01)
    assert not [r for r in requests if paused.t < r.sent_at < config.t]  # no send while restarting
    before = [r for r in requests if r.sent_at <= paused.t]
    after = [r for r in requests if r.sent_at >= config.t]
    assert before and after
    assert sorted(r.id for r in requests) == list(range(len(requests)))  # none lost
    assert [s.command for s in segments] == [sim_command(port, 8), sim_command(port, 64)]
    assert [s.completed + s.failed + s.cancelled for s in summaries] == [len(before), len(after)]
    assert len(result.requests) == len(requests)
    resumed = next(e for e in events if e.t >= config.t - 0.01 and e.kind in ("resume", "set_rate") and e is not paused)
    if resume == "start":
        assert resumed.data["after_rps"] == pytest.approx(RAMP["start_rps"], abs=0.01)
    else:
        assert resumed.data["after_rps"] == pytest.approx(paused.data["before_rps"], rel=0.05)


async def test_bad_commands_are_refused_with_one_line_and_nothing_stops(tmp_path):
    port = free_port()
    server = ManagedServer(ServeCommand.parse(sim_command(port, 8)))
    server.start(60)
    try:
        run, execute, path = live_run(tmp_path, server, "refused")
        bridge, app = start_live(execute, run.snapshot, run, ui_priority="normal", server=server)
        try:
            async with app.run_test(size=(140, 40)) as pilot:
                await wait_for(pilot, lambda: app.latest.state == "ramping", "the run to start")
                await pilot.press("R")
                dialog = app.screen
                field = dialog.query_one(Input)
                for text, why in [
                    ("", "empty command"),
                    ("rampwatch sim --model 'tiny", "No closing quotation"),
                    (f"python3 -m http.server {port}", "is another program"),
                    (sim_command(port + 1, 8), f"must stay at http://127.0.0.1:{port}"),
                ]:
                    field.value = text
                    await pilot.pause(0.05)
                    await pilot.press("enter")
                    assert app.screen is dialog, text  # refused: the dialog stays
                    shown = str(dialog.query_one("#restart-diff", Static).render())
                    assert shown.startswith("✗ ") and why in shown and "\n" not in shown, shown
                await pilot.press("escape")
                assert app.latest.state == "ramping"
                assert not [e for e in app.latest.events if e.data.get("restart")]
                assert server.poll() is None  # still serving
                await pilot.press("s")
                await wait_for(pilot, lambda: app.latest.state == "done", "the end", timeout=30)
                await pilot.press("q")
        finally:
            bridge.finish(drain_timeout=15.0)
    finally:
        server.stop()


async def test_a_new_server_that_fails_to_start_fails_the_run_with_its_reason(tmp_path):
    port = free_port()
    server = ManagedServer(ServeCommand.parse(sim_command(port, 8)))
    server.start(60)
    failures = []
    try:
        run, execute, path = live_run(tmp_path, server, "failed")
        bridge, app = start_live(
            execute, run.snapshot, run, ui_priority="normal", server=server, on_restart_failure=failures.append
        )
        try:
            async with app.run_test(size=(140, 40)) as pilot:
                await wait_for(pilot, lambda: app.latest.state == "ramping" and app.latest.t > 1, "the run to start")
                await pilot.press("R")
                app.screen.query_one(Input).value = sim_command(port, 8).replace("--model tiny", "--model nonesuch")
                await pilot.pause(0.05)
                await pilot.press("enter")
                await wait_for(pilot, lambda: app.latest.state == "done", "the failed run to end", timeout=60)
                await wait_for(pilot, lambda: any(t.startswith("restart: server exited") for t in toasts(app)), "toast")
                await pilot.press("q")
            result = bridge.finish(drain_timeout=15.0)
        finally:
            bridge.finish(drain_timeout=15.0)
    finally:
        server.stop()
    (failure,) = failures
    error = next(e for e in result.events if e.kind == "error")
    assert error.message == f"restart: {failure}" and "server exited" in error.message
    assert error.data["restart"] == "failed" and error.data["server_log_tail"]
    assert result.interrupted and result.requests
    with open_recording(path) as recording:
        assert recording.finished and len(recording.requests) == len(result.requests)
        assert not [e for e in recording.events if e.kind == "config"]


async def test_without_a_started_server_r_says_why(tmp_path):
    from rampwatch.tui.app import make_live_app
    from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot

    app = make_live_app(FrozenSource(fake_snapshot(60.0)), FakeControl())
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("R")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, RestartDialog)
        assert any(NO_SERVER in t for t in toasts(app))


async def test_rampwatch_runs_failed_restart_exits_5_naming_the_log(tmp_path, capsys):
    """`rampwatch run --serve …`'s own wiring (prepare_run, the forked run process,
    finish_run): the summary and recording are kept, one line, exit 5."""
    import io

    from rampwatch.app import session
    from rampwatch.app.live import start_live_prepared
    from tests.tui.test_live_run import run_args

    port = free_port()
    prepared = session.prepare_run(run_args(tmp_path, "--serve", sim_command(port, 8)), out=io.StringIO())
    first = prepared.server
    try:
        bridge, app = start_live_prepared(prepared, ui_priority="normal")
        try:
            async with app.run_test(size=(140, 40)) as pilot:
                await wait_for(pilot, lambda: app.latest.state == "ramping" and app.latest.t > 1, "the run to start")
                await pilot.press("R")
                app.screen.query_one(Input).value = sim_command(port, 8).replace("--max-num-seqs 8", "--max-num-seqs x")
                await pilot.pause(0.05)
                await pilot.press("enter")
                await wait_for(pilot, lambda: app.latest.state == "done", "the failed run to end", timeout=60)
                await pilot.press("q")
            result = bridge.finish(drain_timeout=15.0)
        finally:
            bridge.finish(drain_timeout=15.0)
    finally:
        prepared.close()
    assert first is not None and first.poll() is not None  # the first server was stopped
    summary = io.StringIO()
    assert session.finish_run(prepared, result, out=summary) == 5
    assert (
        "Successful requests:" in summary.getvalue() and f"recording: {prepared.recording_path}" in summary.getvalue()
    )
    err = capsys.readouterr().err.strip().splitlines()
    log = server_log_path(prepared.recording_path)
    assert err[-1] == (
        "rampwatch run: the server restart failed: server exited with code 2 during startup: rampwatch sim: "
        f"error: argument --max-num-seqs: invalid int value: 'x' (exit 5; server log: {log})"
    )
    assert "invalid int value: 'x'" in log.read_text()
