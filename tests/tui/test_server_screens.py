"""The server a run starts (``--serve``) on screen: the startup phase with its log, the
log panel (``o``) during the run, the startup time in the header, and a server that
exits mid-run. Snapshots use a fixed log, pid and clock."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from rampwatch.tui.app import make_live_app
from rampwatch.tui.server_log import ServerLogPanel, ServerStartApp, StartOutcome
from tests.tui.fakes import FakeControl, FrozenSource, fake_snapshot
from tests.tui.settle import charts_settled

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

COMMAND = "vllm serve Qwen/Qwen3-0.6B --max-num-seqs 64 --api-key '<redacted>'"
LOG = [
    "INFO 11-23 16:20:01 [api_server.py:1805] vLLM API server version 0.11.0",
    "INFO 11-23 16:20:01 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-0.6B', 'max_num_seqs': 64, "
    "'api_key': '<redacted>'}",
    "INFO 11-23 16:20:09 [model.py:547] Resolved architecture: Qwen3ForCausalLM",
    "INFO 11-23 16:20:09 [model.py:1510] Using max model len 40960",
    "INFO 11-23 16:20:12 [default_loader.py:267] Loading weights took 1.92 seconds",
    "INFO 11-23 16:20:15 [gpu_model_runner.py:2653] Model loading took 1.12 GiB and 2.4 seconds",
    "INFO 11-23 16:20:24 [kv_cache_utils.py:1087] GPU KV cache size: 1,048,576 tokens",
    "INFO 11-23 16:20:31 [gpu_model_runner.py:3480] Graph capturing finished in 6 secs, took 0.31 GiB",
]


class StoppedClock:
    """12.4 s after the first reading, always."""

    def __init__(self) -> None:
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return 1000.0 if self.readings == 1 else 1012.4


def start_app(start=None, cancel=None) -> ServerStartApp:
    return ServerStartApp(
        command=COMMAND,
        target="http://127.0.0.1:8000",
        pid=lambda: 4242,
        log_lines=lambda: LOG,
        start=start,
        cancel=cancel,
        clock=StoppedClock(),
    )


def test_startup_phase_with_the_server_log_100x20(snap_compare):
    assert snap_compare(start_app(), terminal_size=(100, 20))


async def test_startup_phase_header_and_log_text():
    app = start_app()
    async with app.run_test(size=(140, 20)) as pilot:
        await pilot.pause()
        header = app.header_text().plain
        assert header.startswith(" rampwatch  STARTING SERVER  00:12  pid 4242  waiting for /health")
        assert f"serve {COMMAND}  target http://127.0.0.1:8000" in header
        panel = app.query_one(ServerLogPanel)
        assert str(panel.render()).splitlines() == LOG[-len(str(panel.render()).splitlines()) :]


async def until_exited(pilot) -> None:
    """Until the app has exited by itself (its start worker ended it)."""
    for _ in range(200):
        if pilot.app.return_value is not None:
            return
        await pilot.pause(0.01)
    raise AssertionError("the startup phase did not end")


async def test_startup_phase_ends_when_the_server_is_ready_or_fails_or_is_quit():
    async with start_app(start=lambda: 1.5).run_test() as pilot:
        await until_exited(pilot)
    assert pilot.app.return_value == StartOutcome(ready=True)

    failure = RuntimeError("server exited with code 1 during startup: boom")

    def fail() -> float:
        raise failure

    async with start_app(start=fail).run_test() as pilot:
        await until_exited(pilot)
    assert pilot.app.return_value == StartOutcome(error=failure)

    async with start_app().run_test() as pilot:
        await pilot.press("q")
    assert pilot.app.return_value == StartOutcome(cancelled=True)


async def test_q_while_the_server_starts_stops_it_and_leaves_once_the_start_has_returned():
    """The start runs in a thread the app cannot abandon: ``q`` stops the server (in a
    thread of its own), the start then fails, and only then does the screen close."""
    stopped = threading.Event()

    def start() -> float:
        assert stopped.wait(10), "never stopped"
        raise RuntimeError("server exited with code 143 during startup")

    app = start_app(start=start, cancel=stopped.set)
    async with app.run_test() as pilot:
        await pilot.press("q")
        await until_exited(pilot)
        assert "STOPPING SERVER" in str(app.query_one("#start-header").render())
    assert stopped.is_set()
    assert app.return_value == StartOutcome(cancelled=True)


def live_with_server(server_exit=None):
    snapshot = fake_snapshot(95.0)
    snapshot.header.server_info["managed_server"] = {"command": COMMAND, "startup_s": 31.24}
    return make_live_app(
        FrozenSource(snapshot),
        FakeControl(),
        recording="runs/chat.rwrec",
        server_log=lambda: LOG,
        server_exit=server_exit,
    )


async def log_opened_and_settled(pilot) -> None:
    """``o``, then the charts redrawn at the size the panel leaves them."""
    await pilot.press("o")
    panel = pilot.app.query_one("#server-log", ServerLogPanel)
    for _ in range(200):  # the layout gives the panel its room first, then the charts shrink
        await pilot.pause()
        if panel.size.height > 0:
            break
    await charts_settled(pilot)


def test_live_with_the_server_log_open_100x30(snap_compare):
    """``o`` opens the log under the panels (here under the Rate tab of a terminal below
    120×36); the header names the startup time."""
    assert snap_compare(live_with_server(), terminal_size=(100, 30), run_before=log_opened_and_settled)


async def test_o_toggles_the_server_log_and_a_run_without_a_server_has_none():
    app = live_with_server()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        panel = app.query_one("#server-log", ServerLogPanel)
        assert not panel.display
        assert "(ready in 31.2 s)" in app.query_one("#header").render_text(app.latest).plain
        await pilot.press("o")
        assert panel.display
        await pilot.press("o")
        assert not panel.display
    plain = make_live_app(FrozenSource(fake_snapshot(95.0)), FakeControl())
    async with plain.run_test(size=(160, 48)) as pilot:
        await pilot.press("o")
        assert not plain.query("#server-log")
        assert "ready in" not in plain.query_one("#header").render_text(plain.latest).plain


async def test_a_server_that_exits_mid_run_is_said_once_and_its_log_shown():
    reasons = iter([None, "server exited with code 137 (SIGKILL) during the run: killed"])
    calls = []

    def server_exit():
        calls.append(1)
        return next(reasons, "again")

    app = live_with_server(server_exit)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        for _ in range(50):
            await pilot.pause(0.05)
            if app.server_exit_shown:
                break
        assert app.server_exit_shown
        assert app.query_one("#server-log", ServerLogPanel).display
        toasts = [n.message for n in app._notifications]
        assert toasts == [
            "server exited with code 137 (SIGKILL) during the run: killed — the run is stopping (o: server log, q: quit)"
        ]
        seen = len(calls)
        await pilot.pause(0.6)
        assert len(calls) == seen  # told once: no more checks


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
async def test_sigterm_and_sighup_leave_the_screen_as_q_does(sig):
    """`rampwatch run` then drains the run, stops the server and prints the summary."""
    from rampwatch.app.live import exit_app_on_signals

    app = live_with_server()
    before = signal.getsignal(sig)
    with exit_app_on_signals(app):
        async with app.run_test(size=(100, 30)) as pilot:
            os.kill(os.getpid(), sig)
            for _ in range(200):
                if app.return_code is not None:
                    break
                await pilot.pause(0.01)
            assert app.return_code == 0
    assert signal.getsignal(sig) == before  # put back
