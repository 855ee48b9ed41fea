"""`rampwatch stop ID`: the graceful stop of a run in another process (the live screen's
``q`` → stop: no new requests, in-flight ones drain, the recording is finished), then
wait for the run's exit code."""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

from rampwatch.app import runs
from rampwatch.app.control import RemoteRun, connect
from rampwatch.core.errors import UserError

POLL_S = 0.2


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="ID", help="the run's id, or an unambiguous prefix of it (rampwatch ps)")
    parser.add_argument("--no-wait", action="store_true", help="ask for the stop and return at once")
    parser.add_argument(
        "--timeout", type=float, default=None, metavar="SECONDS", help="give up waiting after this long (exit 1)"
    )


def main(args: argparse.Namespace) -> int:
    directory = runs.checked_dir(create=False)
    state = runs.resolve(args.run_id, directory)
    if state.state == runs.FINISHED:
        print(f"run {state.id}: already finished (exit {state.exit_code})")
        return run_exit_code(state.exit_code)
    if runs.shown_state(state, directory) == runs.STALE:
        raise UserError(f"run {state.id}: its process (pid {state.pid}) is gone; nothing to stop")
    remote = None
    if state.state == runs.STARTING and not runs.socket_path(state.id, directory).exists():
        # Its server is still starting and nothing was sent: the owner's SIGTERM stops the
        # start (and the server) as Ctrl-C would.
        os.kill(state.pid, signal.SIGTERM)
        print(f"run {state.id}: stopping its server's start (nothing was sent yet)", flush=True)
    else:
        remote = RemoteRun(connect(runs.socket_path(state.id, directory))).start()
        remote.stop()
        print(f"run {state.id}: stopping (in-flight requests drain, the recording is finished)", flush=True)
    if args.no_wait:
        if remote is not None:
            remote.close()
        return 0
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    while True:  # the owner writes the exit code after the summary: its file is polled
        final = runs.read_state(runs.state_path(state.id, directory))
        if final is not None and final.state == runs.FINISHED:
            break
        if not runs.pid_alive(state.pid):
            raise UserError(f"run {state.id}: its process (pid {state.pid}) ended without an exit code")
        if deadline is not None and time.monotonic() > deadline:
            print(f"run {state.id}: still stopping after {args.timeout:g} s", flush=True)
            return 1
        time.sleep(POLL_S)
    if remote is not None:
        remote.close()
        if remote.summary:
            print(f"run {state.id}: {remote.summary}")
    where = f"; recording: {final.recording}" if final.recording and Path(final.recording).exists() else ""
    print(f"run {state.id}: finished, exit {final.exit_code}{where}")
    return run_exit_code(final.exit_code)


def run_exit_code(code: int | None) -> int:
    """``stop`` exits as the run did (a script reads the run's outcome from it, as from
    ``wait``): 130 for a run stopped before its end; 1 when the run left none."""
    return code if isinstance(code, int) else 1
