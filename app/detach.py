"""Runs that outlive their terminal.

``launch``: `rampwatch run … --detach` checks what can fail fast (scenario, flags,
paths — one line, exit 2, nothing started), then starts the same command as
`rampwatch run … --headless --run-id ID` in a session of its own (no terminal: a closed
SSH session cannot reach it), its output in a log beside the recording, and returns at
once with the run's id. That process owns the run like any headless one: its server, its
recording, its result JSON, its control socket (``app.control``).

``Hangup``: the live screen's terminal closed (SIGHUP). The process stays, silent: the
screen is left, everything it would write goes to the run's log instead of the dead
terminal, and it keeps the run, its server and the recording until the run ends (by its
schedule or `rampwatch stop`), then writes the summary and result JSON as usual.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rampwatch.app import credentials, runs
from rampwatch.app.run_config import RunConfig
from rampwatch.app.session import plan_run
from rampwatch.core.errors import UserError
from rampwatch.core.interpreter import module_command

# How long --detach waits for the run's process to register (or fail its own checks).
REGISTER_TIMEOUT_S = 30.0
# Then how long it waits for the load to start (a server that does not start, a target
# that does not answer: one line and the run's exit code rather than a run id); a server
# still starting after this is left to start in the background.
LOAD_START_TIMEOUT_S = 10.0


def child_argv(argv: list[str], run_id: str, log: Path, recording: Path | None) -> list[str]:
    """The command the detached process runs: what was typed, without ``--detach`` and
    without the key and the headers (they go through its environment, not the process
    list: ``RunConfig.child_environment``), as a headless run with the id, its log and
    its recording path fixed here."""
    out = [item for item in credentials.without_secret_flags(argv) if item != "--detach"]
    out += ["--headless", "--run-id", run_id, "--detached-log", str(log)]
    if recording is not None and "--record" not in out and not any(a.startswith("--record=") for a in out):
        out += ["--record", str(recording)]
    return module_command("rampwatch.app.cli", *out)


def launch(config: RunConfig) -> int:
    # A bad scenario, flag or path: one line here, nothing started; the outputs are
    # claimed by the process started below, which runs with the same --record and --force.
    plan = plan_run(config, claim=False)
    directory = runs.checked_dir()
    run_id = runs.new_run_id()
    while runs.state_path(run_id, directory).exists():
        run_id = runs.new_run_id()
    recording = None if plan.recording_path is None else plan.recording_path.resolve()
    log = runs.log_path_for(run_id, recording, directory)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = config.child_environment()
    argv = child_argv(list(config.argv) or sys.argv[1:], run_id, log, recording)
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError as exc:
        raise UserError(f"log {log}: {exc.strerror or exc}") from None
    try:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,
            env=env,
            cwd=os.getcwd(),
        )
    finally:
        os.close(fd)
    state = _await_registration(child, run_id, directory)
    if state is not None:
        state = _await_load(child, run_id, directory)
    if state is None:
        code = child.wait()
        last = _last_line(log).removeprefix("rampwatch run: error: ")
        error = UserError(f"the detached run ended at once (exit {code}): {last or 'no output'} (log: {log})")
        error.exit_code = code if code else 1
        raise error
    print(f"rampwatch run: detached as run {run_id} (pid {child.pid})")
    if not loading(state):
        print("  its server is still starting: rampwatch ps shows when the load runs")
    print(f"  watch it:  rampwatch attach {run_id}")
    print(f"  stop it:   rampwatch stop {run_id}")
    print("  list runs: rampwatch ps")
    print(f"  log:       {log}")
    if recording is not None:
        print(f"  recording: {recording}")
    return 0


def _await_registration(child: subprocess.Popen, run_id: str, directory: Path) -> runs.RunState | None:
    """The run's state once its process has registered; None if the process ended first
    (its own checks failed: the reason is the log's last line)."""
    deadline = time.monotonic() + REGISTER_TIMEOUT_S
    path = runs.state_path(run_id, directory)
    while time.monotonic() < deadline:
        state = runs.read_state(path)
        if state is not None:
            return state
        if child.poll() is not None:
            return None
        time.sleep(0.05)  # another process's file: polled
    return runs.read_state(path)


def loading(state: runs.RunState) -> bool:
    """The run's load has started (past its server's start and its first checks)."""
    return state.state == runs.RUNNING and state.run_state not in ("", "starting")


def _await_load(child: subprocess.Popen, run_id: str, directory: Path) -> runs.RunState | None:
    """The run's state once its load runs, or after ``LOAD_START_TIMEOUT_S`` as it is;
    None if its process ended before with a failure."""
    deadline = time.monotonic() + LOAD_START_TIMEOUT_S
    path = runs.state_path(run_id, directory)
    while True:
        state = runs.read_state(path)
        code = child.poll()
        if code is not None:
            return state if code == 0 else None  # a run of a few seconds may be over already
        if (state is not None and loading(state)) or time.monotonic() > deadline:
            return state
        time.sleep(0.05)  # another process's file: polled


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


class Hangup:
    """SIGHUP on the live screen (or its server's start screen) with ``--on-hangup
    detach``. ``__call__`` runs in the signal handler: from that moment nothing of this
    process writes to the terminal (stdout and stderr are /dev/null, SIGHUP is ignored)
    and stdin is a pipe nobody writes to, so a screen still up waits on it quietly (a
    read of /dev/null would return at once, over and over). ``keep`` (once the screen has
    gone) points stdout and stderr at the run's log and says how to attach."""

    def __init__(self, run_id: str | None, log: Path) -> None:
        self.run_id = run_id
        self.log = log
        self.happened = False
        self.kept = False
        self._quiet_stdin: int | None = None  # the pipe's write end, held open

    def __call__(self) -> None:
        if self.happened:
            return
        self.happened = True
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # The screen's Textual driver handles SIGTSTP/SIGCONT: the SIGCONT that follows a
        # hangup would restart its input and output threads after the screen has gone, and
        # this process would never exit (its threads waiting on the quiet stdin below).
        for sig in (signal.SIGTSTP, signal.SIGCONT):
            signal.signal(sig, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
        read_end, self._quiet_stdin = os.pipe()
        os.dup2(read_end, 0)
        os.close(read_end)

    def release_stdin(self) -> None:
        """End the quiet stdin (the screen is about to go): its input thread, told by a
        stale poll of the dead terminal that there is input, is blocked reading the pipe,
        and the screen's exit waits for that thread."""
        if self._quiet_stdin is not None:
            os.close(self._quiet_stdin)
            self._quiet_stdin = None

    def keep(self) -> None:
        if self.kept:
            return
        self.kept = True
        try:
            fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            fd = -1  # stays /dev/null: the run still goes on
        if fd >= 0:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        how = f"rampwatch attach {self.run_id}" if self.run_id else "rampwatch ps"
        print(
            f"rampwatch run: the terminal hung up; the run goes on detached (pid {os.getpid()}): {how}",
            flush=True,
        )
        if self.run_id:
            runs.update_state(self.run_id, detached=True, log=str(self.log))


@contextmanager
def detached_on_hangup(hangup: Hangup | None) -> Iterator[None]:
    """While the block runs, SIGHUP calls ``hangup`` (screens that are up install their
    own handler, which calls it too); after a hangup, SIGHUP stays ignored."""
    if hangup is None:
        yield
        return
    previous = signal.signal(signal.SIGHUP, lambda signum, frame: hangup())
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_IGN if hangup.happened else previous)
