"""`rampwatch run` on a terminal: the run forked into its own process (``ProcessBridge``),
the live Textual app in this one, then the same summary as the headless path."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from textual.app import App

from rampwatch.app import runs
from rampwatch.app.bridge import ProcessBridge, SeriesMirror, lower_ui_priority
from rampwatch.app.control import serve_run, shared_snapshots
from rampwatch.app.detach import Hangup, detached_on_hangup
from rampwatch.app.restart import ServerRestarter
from rampwatch.app.run_config import RunConfig
from rampwatch.app.session import (
    INTERRUPTED_EXIT,
    SERVER_WATCH_INTERVAL_S,
    PreparedRun,
    RunPlan,
    attach_hello,
    build_run,
    finish_run,
    note_failed_start,
    plan_run,
    print_server_tail,
    prometheus_targets,
    run_progress,
)
from rampwatch.app.session.prometheus_linger import linger_targets, note_run_process
from rampwatch.core.controls import RunControl
from rampwatch.core.errors import ServerExited, UserError
from rampwatch.core.timeline import Snapshot
from rampwatch.loadgen.server.managed import ManagedServer
from rampwatch.tui.app import RampwatchApp, make_live_app
from rampwatch.tui.server_log import ServerStartApp

# After a stop, in-flight requests get the run's grace period; past it (and this margin)
# the UI has the run cancel them, so that it still ends with its summary.
DRAIN_MARGIN_S = 5.0


def start_live(
    run_coro_factory: Callable[[], Awaitable[Any]],
    snapshot_fn: Callable[[], Snapshot],
    control: RunControl,
    *,
    recording: str | None = None,
    rate_step_rps: float | None = None,
    refresh_hz: float = 4.0,
    ui_priority: str = "idle",
    log_path: str | None = None,
    mouse: bool = True,
    server_log: Callable[[], list[str]] | None = None,
    server_exit: Callable[[ProcessBridge], str | None] | None = None,
    server: ManagedServer | None = None,
    on_server: Callable[[ManagedServer | None], None] = lambda server: None,
    on_restart_failure: Callable[[UserError], None] = lambda error: None,
    mirror: SeriesMirror | None = None,
    after: Callable[[], object] | None = None,
) -> tuple[ProcessBridge, RampwatchApp]:
    """Fork the run into its own process and build the live app on it. The caller runs
    the app (``app.run()`` on a terminal, ``app.run_test()`` in tests) and then calls
    ``bridge.finish()``. Build the run's objects before calling: the run process
    inherits them by fork and is the only one that executes them. ``server``: the
    started server the run loads, which the screen's ``R`` restarts (``app.restart``;
    ``on_server`` is told of the server in service, ``on_restart_failure`` of a new one
    that did not start)."""
    bridge = ProcessBridge(
        run_coro_factory,
        snapshot_fn,
        control,
        log_path=log_path,
        mirror=mirror,
        mirror_priority=ui_priority,
        after=after,
    ).start()
    restarter = None
    if server is not None:
        restarter = ServerRestarter(server, bridge.control, bridge, on_server=on_server, on_failure=on_restart_failure)
        server_log = restarter.log_tail  # after a restart, the new server's log
    if ui_priority != "normal":
        lower_ui_priority(ui_priority)  # drawing yields the CPU to the load process
    app = make_live_app(
        bridge,
        bridge.control,
        run_failed=lambda: bridge.failure is not None,
        refresh_hz=refresh_hz,
        recording=recording,
        rate_step_rps=rate_step_rps,
        mouse=mouse,
        server_log=server_log,
        server_exit=None if server_exit is None else (lambda: server_exit(bridge)),
        server=restarter,
    )
    return bridge, app


def start_live_prepared(
    prepared: PreparedRun, *, ui_priority: str = "idle", log_path: str | None = None, mouse: bool = True
) -> tuple[ProcessBridge, RampwatchApp]:
    """``start_live`` for a ``PreparedRun``: the run process executes ``prepared.execute``
    (which closes the recording there, its only writer). A server the run started is
    watched from here, its owner: an exit is passed on to the run process. ``R`` restarts
    it (``prepared.server`` follows the one in service, so the watch and ``close`` act on
    the right one)."""
    recording = str(prepared.recording_path) if prepared.recording_path else None
    server = prepared.server
    snapshot = shared_snapshots(prepared.run.snapshot)

    def server_exit(bridge: ProcessBridge) -> str | None:
        exited = prepared.check_server(bridge.control)
        return None if exited is None else str(exited)

    return start_live(
        # the run process serves the run's control socket (`rampwatch attach`)
        serve_run(
            prepared.config.run_id,
            prepared.execute,
            snapshot,
            prepared.run,
            hello=attach_hello(prepared),
            progress=lambda: run_progress(prepared.run),
        ),
        snapshot,
        prepared.run,
        recording=recording,
        rate_step_rps=prepared.run.options.rate_step_rps,
        ui_priority=ui_priority,
        log_path=log_path,
        mouse=mouse,
        server_log=None if server is None else (lambda: server.tail),
        server_exit=None if server is None else server_exit,
        server=server,
        on_server=lambda serving: setattr(prepared, "server", serving),
        on_restart_failure=lambda error: setattr(prepared, "restart_error", error),
        # the screen's series are built here, from the run's items, not on the run's loop
        mirror=SeriesMirror(prepared.run.series, prepared.run.sink.sinks.append, prepared.run.now),
        # --prometheus-port: the run's process serves the final figures on after the run
        after=lingering(prepared.config),
    )


def lingering(config: RunConfig) -> Callable[[], object] | None:
    """What the live run's process does after its result: serve ``--prometheus-port``'s
    final figures until scraped (``app.session.prometheus_linger``; the screen says it)."""
    if config.prometheus_port is None or config.prometheus_linger <= 0:
        return None
    return lambda: linger_targets(prometheus_targets(), config.prometheus_linger, err=None)


@contextmanager
def exit_app_on_signals(
    app: App,
    leave: Callable[[], object] | None = None,
    on_hangup: Callable[[], object] | None = None,
    hangup_leaves: bool = True,
) -> Iterator[None]:
    """SIGTERM and SIGHUP leave the screen as ``q`` does (``leave``, default ``app.exit``;
    the caller then drains the run, stops the server and prints the summary); outside the
    app's loop they interrupt. ``on_hangup`` is called first on SIGHUP, in the handler
    (``app.detach.Hangup``: the run then goes on detached); with ``hangup_leaves`` false
    the screen then stays, unseen, until it ends by itself (a server's start)."""

    def handler(signum: int, _frame: object) -> None:
        if signum == signal.SIGHUP and on_hangup is not None:
            on_hangup()
            if not hangup_leaves:
                return
            getattr(on_hangup, "release_stdin", lambda: None)()  # the screen goes now
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise KeyboardInterrupt from None
        loop.call_soon_threadsafe(leave if leave is not None else app.exit)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def start_server_on_screen(
    server: ManagedServer, timeout_s: float, mouse: bool = True, hangup: Callable[[], object] | None = None
) -> bool:
    """The startup phase on screen: ``STARTING SERVER`` and the server's log until it
    serves (True), or the user quits (False: the server is stopped). A failure to start is
    raised once the screen is gone, after the server's last log lines. A hangup with
    ``hangup`` (``--on-hangup detach``) lets the start go on unseen."""

    def then_release(step: Callable[[], object]) -> Callable[[], object]:
        """``step``, after which the start screen goes: a hung-up screen's stdin must end
        first (``Hangup.release_stdin``)."""

        def run() -> object:
            try:
                return step()
            finally:
                release = getattr(hangup, "release_stdin", None)
                if release is not None and getattr(hangup, "happened", False):
                    release()

        return run

    app = ServerStartApp(
        command=server.command.shown,
        target=server.url,
        pid=lambda: server.pid,
        log_lines=lambda: server.tail,
        start=then_release(lambda: server.start(timeout_s)),
        cancel=then_release(server.stop),
    )
    with exit_app_on_signals(app, app.action_cancel, on_hangup=hangup, hangup_leaves=False):
        outcome = app.run(mouse=mouse)
    if outcome is None or outcome.cancelled:
        server.stop()  # stopped already, unless the app ended some other way
        return False
    if outcome.error is not None:
        server.stop()
        if isinstance(outcome.error, ServerExited):
            print_server_tail(outcome.error.tail)
        raise outcome.error
    return True


def run_live(config: RunConfig) -> int:
    """Show the live screen over the run until the user quits, then stop the run
    gracefully (if still going) and print its summary. Whatever the run process prints
    while the screen is up goes to a log that is printed after. With ``--on-hangup
    detach`` a hangup of the terminal leaves the run going, unseen (``app.detach.Hangup``)."""
    plan = plan_run(config)
    run_id = config.run_id
    if run_id is not None:
        runs.register(run_id, plan)
    hangup = None
    if config.on_hangup == "detach":
        hangup = Hangup(run_id, runs.log_path_for(run_id or "run", plan.recording_path))
    with detached_on_hangup(hangup):
        return _run_live(config, plan, run_id, hangup)


# How long a repeated run's screen says which repeat it shows (then the terminal line
# before each screen says it).
REPEAT_NOTICE_S = 20.0


# How long a finished repeat (not the last) stays on screen before the next one's cool-down.
REPEAT_LEAVE_S = 5.0


def repeat_notice(config: RunConfig) -> str:
    """The live screen's line for one of `run --repeats N`'s runs."""
    if config.repeat == config.repeats:
        return f"repeat {config.repeat}/{config.repeats} (seed {config.seed}), the last one"
    return (
        f"repeat {config.repeat}/{config.repeats} (seed {config.seed}): once it is done the next follows "
        f"({REPEAT_LEAVE_S:g} s on, or q); stopping it before then ends the repeats"
    )


def _run_live(config: RunConfig, plan: RunPlan, run_id: str | None, hangup: Hangup | None) -> int:
    mouse = not config.no_mouse

    def hung_up() -> bool:
        return hangup is not None and hangup.happened

    if plan.server is not None:
        try:
            started = start_server_on_screen(plan.server, config.serve_timeout, mouse, hangup)
        except UserError as exc:
            if hangup is not None and hung_up():
                hangup.keep()  # the error's line goes to the log
            note_failed_start(plan, exc)
            raise
        if not started:
            print("rampwatch run: stopped before the server was ready; nothing was run", file=sys.stderr)
            return INTERRUPTED_EXIT
    if hangup is not None and hung_up():
        hangup.keep()  # hung up during the server's start: no live screen
    prepared = _build(plan)
    drain_timeout = prepared.run.options.stop_grace_s + DRAIN_MARGIN_S
    with tempfile.NamedTemporaryFile(prefix="rampwatch-run-", suffix=".log", delete=False) as log:
        log_path = log.name
    try:
        bridge, app = start_live_prepared(prepared, log_path=log_path, mouse=mouse)
        if config.prometheus_port is not None:  # the run's process may serve on after it
            note_run_process(bridge, f"{config.prometheus_host}:{config.prometheus_port}")
        if run_id is not None:
            app.call_later(app.notify, f"run {run_id} · rampwatch attach {run_id} watches it from another terminal")
        if config.repeat is not None:  # `run --repeats N` (app.repeats): which of them this screen shows
            app.call_later(app.notify, repeat_notice(config), timeout=REPEAT_NOTICE_S)
            if config.repeat < config.repeats:  # unattended, the repeats go on to the last
                app.leave_when_done_s = REPEAT_LEAVE_S
        try:
            if not hung_up():
                # Without mouse capture the terminal selects text as usual (``c`` toggles it).
                with exit_app_on_signals(app, on_hangup=hangup):
                    app.run(mouse=mouse)
            if hangup is not None and hung_up():
                hangup.keep()
                # The run goes on until its schedule ends or `rampwatch stop`; this process
                # keeps the server and watches it as the screen did.
                while not bridge.join(SERVER_WATCH_INTERVAL_S):
                    prepared.check_server(bridge.control)
        finally:
            if not bridge.done:
                print("rampwatch run: stopping — draining in-flight requests…", file=sys.stderr)
            try:
                result = bridge.finish(drain_timeout)
            finally:
                _print_log(log_path)
    except asyncio.CancelledError:
        print(
            "rampwatch run: the run did not end after its in-flight requests were cancelled; "
            "it was abandoned" + (f" (recording so far: {prepared.recording_path})" if prepared.recording_path else ""),
            file=sys.stderr,
        )
        return 1
    finally:
        prepared.close()
    return finish_run(prepared, result)


def _build(plan: RunPlan) -> PreparedRun:
    try:
        return build_run(plan)
    except BaseException:
        if plan.server is not None:
            plan.server.stop()
        raise


def _print_log(path: str) -> None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        os.unlink(path)
    except OSError:
        return
    if text.strip():
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
