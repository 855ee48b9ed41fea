"""`rampwatch run`: the live UI when stdout is a terminal, else (or with --headless) the
headless run of ``loadgen.cli``.

Contract with ``loadgen.cli`` (the run's flags and headless path live there):

- ``configure(parser)`` adds the run flags (including ``--headless``);
- ``main(args) -> int`` runs headless;
- ``prepare_run(args) -> PreparedRun`` builds the run (``.run`` with ``execute()``,
  ``snapshot()`` and the RunControl methods; ``.recorder``, ``.recording_path``,
  ``close()``) without starting any loop or thread, and ``finish_run(prepared, result)``
  prints the summary and returns the exit code. The run then executes in a forked
  process (see ``tui.live_runner.ProcessBridge``); the UI stays in this one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from typing import Any, Awaitable, Callable


def _loadgen_cli():
    try:
        return importlib.import_module("loadgen.cli")
    except ModuleNotFoundError as exc:
        if exc.name != "loadgen.cli":
            raise
        return None


def configure(parser: argparse.ArgumentParser) -> None:
    cli = _loadgen_cli()
    if cli is not None:
        cli.configure(parser)
        return
    parser.add_argument("scenario", nargs="?", help="scenario name or YAML file")
    parser.add_argument("--headless", action="store_true", help="no UI: print progress and the summary")


def want_tui(args: argparse.Namespace, stdout=None) -> bool:
    stdout = stdout if stdout is not None else sys.stdout
    if getattr(args, "headless", False):
        return False
    try:
        return bool(stdout.isatty())
    except (AttributeError, ValueError):
        return False


def start_live(
    run_coro_factory: Callable[[], Awaitable[Any]],
    snapshot_fn: Callable[[], Any],
    control: Any,
    *,
    recording: str | None = None,
    rate_step_rps: float | None = None,
    refresh_hz: float = 4.0,
    ui_priority: str = "idle",
    log_path: str | None = None,
):
    """Fork the run into its own process (``ProcessBridge``) and build the live app on
    it; returns ``(bridge, app)``. The caller runs the app (``app.run()`` on a terminal,
    ``app.run_test()`` in tests) and then calls ``bridge.finish()``. Build the run's
    objects before calling: they are inherited by fork."""
    from tui.app import make_app
    from tui.live_runner import ProcessBridge, lower_ui_priority

    bridge = ProcessBridge(run_coro_factory, snapshot_fn, control, log_path=log_path).start()
    if ui_priority != "normal":
        lower_ui_priority(ui_priority)  # drawing yields the CPU to the load process
    app = make_app(bridge, bridge.control, mode="live", refresh_hz=refresh_hz, recording=recording,
                   rate_step_rps=rate_step_rps)
    return bridge, app


def run_tui(
    run_coro_factory: Callable[[], Awaitable[Any]],
    snapshot_fn: Callable[[], Any],
    control: Any,
    *,
    recording: str | None = None,
    rate_step_rps: float | None = None,
    refresh_hz: float = 4.0,
    drain_timeout: float = 30.0,
    ui_priority: str = "idle",
) -> Any:
    """Show the live screen over the run (see ``start_live``) until the user quits, then
    stop the run gracefully (if still going) and return its result (or raise its error).

    Whatever the run prints while the screen is up goes to a log that is printed after."""
    import tempfile

    log = tempfile.NamedTemporaryFile(prefix="rampwatch-run-", suffix=".log", delete=False)
    log.close()
    bridge, app = start_live(run_coro_factory, snapshot_fn, control, recording=recording,
                             rate_step_rps=rate_step_rps, refresh_hz=refresh_hz, ui_priority=ui_priority,
                             log_path=log.name)
    try:
        app.run()
    finally:
        if not bridge.done:
            print("rampwatch run: stopping — draining in-flight requests…", file=sys.stderr)
        try:
            return bridge.finish(drain_timeout)
        finally:
            _replay_log(log.name)


def _replay_log(path: str) -> None:
    import os

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        os.unlink(path)
    except OSError:
        return
    if text.strip():
        sys.stderr.write(text if text.endswith("\n") else text + "\n")


def main(args: argparse.Namespace) -> int:
    cli = _loadgen_cli()
    if cli is None:
        print("rampwatch run: not implemented yet", file=sys.stderr)
        return 2
    prepare = getattr(cli, "prepare_run", None)
    finish = getattr(cli, "finish_run", None)
    if prepare is None or finish is None or not want_tui(args):
        return int(cli.main(args) or 0)
    prepared = prepare(args)
    options = prepared.run.options
    # After a stop, in-flight requests get the run's grace period; past it (and a
    # margin) the UI has the run cancel them so that it still ends with its summary.
    drain_timeout = float(getattr(options, "stop_grace_s", 10.0)) + 5.0
    try:
        result = run_tui(*live_parts(prepared), recording=_recording_label(prepared),
                         rate_step_rps=getattr(options, "rate_step_rps", None), drain_timeout=drain_timeout)
    except asyncio.CancelledError:
        print("rampwatch run: the run did not end after its in-flight requests were cancelled; "
              "it was abandoned" + (f" (recording so far: {prepared.recording_path})" if prepared.recording_path else ""),
              file=sys.stderr)
        return 1
    finally:
        prepared.recorder = None  # this process's copy never wrote: closing it would clobber the file
        prepared.close()
    if getattr(result, "recording_error", None):
        prepared.recording_error = result.recording_error
    return int(finish(prepared, result) or 0)


def _recording_label(prepared) -> str | None:
    return str(prepared.recording_path) if prepared.recording_path else None


def live_parts(prepared) -> tuple[Callable[[], Awaitable[Any]], Callable[[], Any], Any]:
    """What the run process needs from a ``PreparedRun``: the coroutine factory (which
    closes the recording in that process, its owner from the fork on), the snapshot
    function and the RunControl."""
    run = prepared.run
    recorder = prepared.recorder

    async def run_and_close_recording():
        result = None
        try:
            result = await run.execute()
            return result
        finally:
            if recorder is not None:
                recorder.close()
                if result is not None and recorder.error is not None:
                    result.recording_error = str(recorder.error)

    return run_and_close_recording, run.snapshot, run


def start_live_prepared(prepared, *, ui_priority: str = "idle", log_path: str | None = None):
    """``start_live`` for a ``PreparedRun`` (the wiring `rampwatch run` uses)."""
    return start_live(*live_parts(prepared), recording=_recording_label(prepared),
                      rate_step_rps=getattr(prepared.run.options, "rate_step_rps", None),
                      ui_priority=ui_priority, log_path=log_path)
