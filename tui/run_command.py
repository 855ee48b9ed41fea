"""`rampwatch run`: the live UI when stdout is a terminal, else (or with --headless) the
headless run of ``loadgen.cli``.

Contract with ``loadgen.cli`` (the run's flags and headless path live there):

- ``configure(parser)`` adds the run flags (including ``--headless``);
- ``main(args) -> int`` runs headless;
- ``prepare_live_run(args)`` returns an object with ``run_coro_factory`` (no-arg callable
  returning the run coroutine), ``snapshot_fn`` (returns the current Snapshot; called on
  the run's loop), ``control`` (the RunControl), optional ``recording_path`` and
  ``rate_step_rps``, and optional ``finish(result) -> int`` (prints the summary, returns
  the exit code). Without ``prepare_live_run`` the command runs headless.
"""

from __future__ import annotations

import argparse
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


def run_tui(
    run_coro_factory: Callable[[], Awaitable[Any]],
    snapshot_fn: Callable[[], Any],
    control: Any,
    *,
    recording: str | None = None,
    rate_step_rps: float | None = None,
    refresh_hz: float = 4.0,
    drain_timeout: float = 30.0,
) -> Any:
    """Run the load in its own thread and loop, show the live screen until the user quits,
    then stop the run gracefully (if still going) and return its result (or raise its error)."""
    from tui.app import make_app
    from tui.live_runner import LiveBridge

    bridge = LiveBridge(run_coro_factory, snapshot_fn, control).start()
    app = make_app(bridge, bridge.control, mode="live", refresh_hz=refresh_hz, recording=recording, rate_step_rps=rate_step_rps)
    try:
        app.run()
    finally:
        if not bridge.done:
            print("rampwatch run: stopping — draining in-flight requests…", file=sys.stderr)
    return bridge.finish(drain_timeout)


def main(args: argparse.Namespace) -> int:
    cli = _loadgen_cli()
    if cli is None:
        print("rampwatch run: not implemented yet", file=sys.stderr)
        return 2
    prepare = getattr(cli, "prepare_live_run", None)
    if prepare is None or not want_tui(args):
        return int(cli.main(args) or 0)
    live = prepare(args)
    result = run_tui(
        live.run_coro_factory,
        live.snapshot_fn,
        live.control,
        recording=getattr(live, "recording_path", None),
        rate_step_rps=getattr(live, "rate_step_rps", None),
    )
    finish = getattr(live, "finish", None)
    return int(finish(result) or 0) if finish is not None else 0
