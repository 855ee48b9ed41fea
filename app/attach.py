"""`rampwatch attach ID`: the live screen of a run in another process — detached
(`rampwatch run --detach`), left by its terminal (SIGHUP), or on another terminal — over
its control socket (``app.control``). ``q`` detaches (the run goes on) or stops the run;
many screens may be attached at once. A finished run opens its replay."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from rampwatch.app import replay, runs
from rampwatch.app.control import RemoteRun, connect
from rampwatch.core.errors import UserError
from rampwatch.tui.app import make_live_app

FIRST_SNAPSHOT_TIMEOUT_S = 10.0
STARTING_POLL_S = 0.25


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="ID", help="the run's id, or an unambiguous prefix of it (rampwatch ps)")
    parser.add_argument("--read-only", action="store_true", help="watch only: the keys that steer the run are off")
    parser.add_argument(
        "--no-mouse", action="store_true", help="leave the mouse to the terminal, so text can be selected"
    )


def what_to_open(state: runs.RunState, shown: str, socket_exists: bool) -> tuple[str, str | None]:
    """("live", None) to attach to the run's socket, ("replay", recording) for a finished
    run, ("wait", None) while its server starts; one line (UserError) otherwise."""
    if shown == runs.FINISHED:
        if state.recording and Path(state.recording).exists():
            return "replay", state.recording
        raise UserError(f"run {state.id}: finished (exit {state.exit_code}) and left no recording to replay")
    if shown == runs.STALE:
        kept = f"; what it recorded: {state.recording}" if state.recording else ""
        raise UserError(f"run {state.id}: its process (pid {state.pid}) is gone (killed?){kept}")
    if socket_exists:
        return "live", None
    return "wait", None


def main(args: argparse.Namespace) -> int:
    directory = runs.checked_dir(create=False)
    state = runs.resolve(args.run_id, directory)
    said_waiting = False
    while True:
        shown = runs.shown_state(state, directory)
        action, recording = what_to_open(state, shown, runs.socket_path(state.id, directory).exists())
        if action != "wait":
            break
        if not said_waiting:
            print(f"run {state.id}: starting (its server); waiting for it … (Ctrl-C gives up)", flush=True)
            said_waiting = True
        time.sleep(STARTING_POLL_S)  # another process's files: polled
        state = runs.read_state(runs.state_path(state.id, directory)) or state
    if action == "replay":
        assert recording is not None
        return _replay(recording, args.no_mouse)
    if not sys.stdout.isatty():
        raise UserError("attach shows the live screen: run it on a terminal (rampwatch ps lists runs)")
    remote = RemoteRun(connect(runs.socket_path(state.id, directory))).start()
    if not remote.first.wait(FIRST_SNAPSHOT_TIMEOUT_S) or remote.lost:
        remote.close()
        raise UserError(f"run {state.id}: its control socket did not answer")
    return _watch(remote, state.id, read_only=args.read_only, mouse=not args.no_mouse)


def _watch(remote: RemoteRun, run_id: str, *, read_only: bool, mouse: bool) -> int:
    app = make_live_app(
        remote,
        None if read_only else remote,
        run_failed=lambda: remote.lost,
        recording=remote.hello.get("recording"),
        rate_step_rps=remote.hello.get("rate_step_rps"),
        mouse=mouse,
        attached=run_id,
    )

    def tell_the_end() -> None:
        remote.done.wait()
        if remote.summary:
            try:
                app.call_from_thread(app.notify, remote.summary, title="run finished", timeout=3600)
            except RuntimeError:  # the screen was left already
                pass

    threading.Thread(target=tell_the_end, name="rampwatch-attach-end", daemon=True).start()

    def hello() -> None:
        mode = "read-only: " if read_only else ""
        app.notify(f"{mode}attached to run {run_id} — q detaches (the run goes on)", timeout=6)

    app.call_later(hello)
    outcome: object = app.run(mouse=mouse)  # "stop" when the viewer stopped the run
    if outcome == "stop" and not remote.done.is_set():
        print(f"run {run_id}: stopping — in-flight requests drain (Ctrl-C leaves it stopping)", flush=True)
        remote.done.wait()
    remote.close()
    if remote.summary:
        print(f"run {run_id}: {remote.summary}")
        return 0
    if remote.lost:
        raise UserError(f"run {run_id}: the connection to the run was lost (its process ended?)")
    print(f"detached from run {run_id}; it goes on (rampwatch attach {run_id} · rampwatch stop {run_id})")
    return 0


def _replay(recording: str, no_mouse: bool) -> int:
    parser = argparse.ArgumentParser()
    replay.configure(parser)
    argv = [recording, "--no-mouse"] if no_mouse else [recording]
    return int(replay.main(parser.parse_args(argv)) or 0)
