"""Runs that outlive their terminal, as a person uses them: `rampwatch run --detach`,
two `rampwatch attach` screens at once (in tmux), `rampwatch stop` from a third
terminal; and a live run whose terminal closes (SIGHUP) found again with `ps`/`attach`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rampwatch.record.reader import open_recording
from tests.processes import free_port, processes_naming

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]

RAMPWATCH = [sys.executable, "-m", "rampwatch.app.cli"]
SIM_FLAGS = ["--sim-hardware", "instant", "--sim-model", "tiny", "--duration", "60"]


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    # a short runs directory of the test's own (a Unix socket's path has at most 107 bytes)
    with tempfile.TemporaryDirectory(prefix="rw-", dir="/tmp") as runtime:
        os.chmod(runtime, 0o700)
        yield {**os.environ, "XDG_RUNTIME_DIR": runtime}


class Tmux:
    """A tmux server of the test's own (``-L``): windows, their text, its end."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"rw-test-{os.getpid()}-{time.monotonic_ns()}"
        self.env = env
        self.started = False

    def tmux(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, env=self.env)
        return out.stdout

    def open(self, name: str, argv: list[str]) -> None:
        """A window running ``argv``; the shell stays after it, saying its exit code."""
        command = f"{shlex.join(argv)}; echo EXIT=$?; sleep 600"
        if not self.started:
            self.tmux("new-session", "-d", "-s", "t", "-n", name, "-x", "120", "-y", "40", command)
            self.started = True
        else:
            self.tmux("new-window", "-t", "t", "-n", name, command)

    def text(self, name: str) -> str:
        return self.tmux("capture-pane", "-p", "-t", f"t:{name}")

    def wait_for(self, name: str, *texts: str, timeout_s: float = 20.0) -> str:
        """The window's text once it shows all of ``texts`` (another process's screen:
        polled)."""
        deadline = time.monotonic() + timeout_s
        while True:
            screen = self.text(name)
            if all(t in screen for t in texts):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"window {name} never showed {texts}; it shows:\n{screen}")
            time.sleep(0.1)

    def close(self) -> None:
        self.tmux("kill-server")


@pytest.fixture
def tmux(env) -> Iterator[Tmux]:
    server = Tmux(env)
    try:
        yield server
    finally:
        server.close()


def rampwatch(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*RAMPWATCH, *args], capture_output=True, text=True, env=env, timeout=timeout)


def listed(env: dict[str, str]) -> list[dict]:
    out = rampwatch(env, "ps", "--json")
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def wait_listed(env: dict[str, str], run_id: str, timeout_s: float = 20.0, **expected) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = [r for r in listed(env) if r["id"] == run_id]
        if rows and all(rows[0].get(k) == v for k, v in expected.items()):
            return rows[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} never listed with {expected}: {rows}")
        time.sleep(0.1)  # another process's state file: polled


def check_complete_recording(recording: Path) -> None:
    """Every request sent is in the recording, with the run's stop, and the result JSON
    beside it counts them all."""
    rec = open_recording(recording)
    ids = sorted(r.id for r in rec.requests)
    assert ids and ids == list(range(len(ids)))
    assert any(e.kind == "stop" for e in rec.events)
    result = json.loads(recording.with_suffix(".json").read_text())
    assert result["num_prompts"] == len(ids)


def test_detach_attach_twice_and_stop_from_a_third_terminal(tmp_path, env, tmux):
    recording = tmp_path / "run.rwrec"
    started = rampwatch(env, "run", "chat", *SIM_FLAGS, "--record", str(recording), "--detach")
    assert started.returncode == 0, started.stderr
    first = started.stdout.splitlines()[0]
    assert first.startswith("rampwatch run: detached as run ")
    run_id = first.split()[5]
    assert f"  watch it:  rampwatch attach {run_id}" in started.stdout
    assert f"  stop it:   rampwatch stop {run_id}" in started.stdout
    row = wait_listed(env, run_id, shown_state="running", detached=True)
    assert row["recording"] == str(recording) and row["log"] == str(tmp_path / "run.log")

    tmux.open("a", [*RAMPWATCH, "attach", run_id[:4]])
    tmux.open("b", [*RAMPWATCH, "attach", run_id, "--read-only"])
    tmux.wait_for("a", f"attached to run {run_id}", "RAMPING")
    tmux.wait_for("b", f"read-only: attached to run {run_id}", "RAMPING")

    stopped = rampwatch(env, "stop", run_id)
    assert stopped.returncode == 130, stopped.stderr  # the run's own exit code
    lines = stopped.stdout.splitlines()
    assert lines[0] == f"run {run_id}: stopping (in-flight requests drain, the recording is finished)"
    assert lines[-1] == f"run {run_id}: finished, exit 130; recording: {recording}"

    for window in ("a", "b"):
        screen = tmux.wait_for(window, "DONE", "run finished")
        assert "run done after " in screen  # the run's summary line
    check_complete_recording(recording)
    log = (tmp_path / "run.log").read_text()
    assert "rampwatch run: stopped before the end (exit 130)" in log and "Traceback" not in log
    assert wait_listed(env, run_id, shown_state="finished")["exit_code"] == 130
    port = row["target"].rsplit(":", 1)[1]
    assert processes_naming(f"--port {port}") == []  # the server went with the run

    # the viewers leave with the summary; attaching to the finished run opens its replay
    tmux.tmux("send-keys", "-t", "t:a", "q")
    screen = tmux.wait_for("a", "EXIT=0")
    assert f"run {run_id}: run done after" in screen
    tmux.open("replay", [*RAMPWATCH, "attach", run_id])
    tmux.wait_for("replay", "REPLAY")


def wait_processes_gone(text: str, timeout_s: float = 20.0) -> list[int]:
    """The processes still naming ``text`` once they had ``timeout_s`` to end."""

    def comm(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/comm").read_text()
        except OSError:  # gone meanwhile
            return "tmux"

    def runs() -> list[int]:  # not the tmux server, whose command line names its first window's
        return [pid for pid in processes_naming(text) if not comm(pid).startswith("tmux")]

    deadline = time.monotonic() + timeout_s
    while (left := runs()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_live_run_whose_terminal_closes_goes_on_detached(tmp_path, env, tmux):
    recording = tmp_path / "run.rwrec"
    tmux.open("live", [*RAMPWATCH, "run", "chat", *SIM_FLAGS, "--record", str(recording)])
    tmux.wait_for("live", "RAMPING")
    (row,) = listed(env)
    run_id = row["id"]
    assert row["detached"] is False
    tmux.open("keep", ["sleep", "600"])  # the tmux server outlives the closed window
    tmux.tmux("kill-window", "-t", "t:live")  # the terminal closes: SIGHUP

    row = wait_listed(env, run_id, detached=True)
    assert row["shown_state"] == "running"
    log = tmp_path / "run.log"
    assert log.read_text().startswith(f"rampwatch run: the terminal hung up; the run goes on detached (pid {row['pid']}): rampwatch attach {run_id}")  # fmt: skip

    tmux.open("again", [*RAMPWATCH, "attach", run_id])
    tmux.wait_for("again", f"attached to run {run_id}", "RAMPING")
    stopped = rampwatch(env, "stop", run_id)
    assert stopped.returncode == 130, stopped.stderr  # the run's own exit code
    assert stopped.stdout.splitlines()[-1] == f"run {run_id}: finished, exit 130; recording: {recording}"
    tmux.wait_for("again", "DONE", "run done after ")
    check_complete_recording(recording)
    text = log.read_text()
    assert "result JSON: " in text and "Traceback" not in text
    # Neither the screen's process nor the run's is left behind (the run process once
    # restarted the start screen's terminal driver on the hangup's SIGCONT and never exited).
    assert wait_processes_gone(f"--record {recording}") == []


def test_detach_checks_fail_fast_with_one_line_and_nothing_left_running(tmp_path, env):
    out = rampwatch(env, "run", "no-such-scenario", "--record", str(tmp_path / "x.rwrec"), "--detach")
    assert out.returncode == 2
    assert out.stdout == "" and len(out.stderr.splitlines()) == 1
    assert out.stderr.startswith("rampwatch run: error: ")
    assert listed(env) == [] and not (tmp_path / "x.log").exists()


@pytest.mark.parametrize("command", ["attach", "stop"])
def test_an_unknown_run_id_is_one_line(env, command):
    out = rampwatch(env, command, "0123abcd")
    assert out.returncode == 2
    assert out.stderr == (
        f"rampwatch {command}: error: run id '0123abcd': no such run of yours on this host (see rampwatch ps)\n"
    )


def test_a_detached_run_that_fails_at_its_start_is_one_line_with_its_exit_code(tmp_path, env):
    out = rampwatch(env, "run", "chat", "--target", "http://127.0.0.1:1", "--model", "m",
                    "--record", str(tmp_path / "run.rwrec"), "--detach")  # fmt: skip
    assert out.returncode == 3  # the run's own: the target is unreachable
    assert out.stdout == ""
    assert out.stderr.startswith("rampwatch run: error: the detached run ended at once (exit 3): cannot reach ")
    assert out.stderr.endswith(f"(log: {tmp_path / 'run.log'})\n") and len(out.stderr.splitlines()) == 1
    (row,) = listed(env)
    assert (row["shown_state"], row["exit_code"]) == ("finished", 3)


def test_a_hangup_during_the_server_start_lets_the_start_and_the_run_go_on(tmp_path, env, tmux):
    port = free_port()
    # a server that takes 3 s to start: the terminal closes while STARTING SERVER is shown
    script = tmp_path / "slow_start.sh"
    sim = shlex.join([*RAMPWATCH, "sim", "--hardware", "instant", "--model", "tiny", "--port", str(port)])
    script.write_text(f"sleep 3\nexec {sim}\n")
    recording = tmp_path / "run.rwrec"
    serve = f"sh {script} --port {port}"
    tmux.open("live", [*RAMPWATCH, "run", "chat", "--serve", serve, "--duration", "60", "--record", str(recording)])
    tmux.wait_for("live", "STARTING SERVER")
    tmux.open("keep", ["sleep", "600"])
    tmux.tmux("kill-window", "-t", "t:live")

    (row,) = [wait_listed(env, r["id"], detached=True, run_state="ramping") for r in listed(env)]
    assert row["shown_state"] == "running"
    deadline = time.monotonic() + 30  # some requests sent, so that the stop interrupts a run
    while (row := next(r for r in listed(env) if r["id"] == row["id"])).get("elapsed_s", 0) < 3:
        assert time.monotonic() < deadline, row
        time.sleep(0.2)
    stopped = rampwatch(env, "stop", row["id"])
    assert stopped.returncode == 130, stopped.stderr
    assert stopped.stdout.splitlines()[-1] == f"run {row['id']}: finished, exit 130; recording: {recording}"
    check_complete_recording(recording)
    assert wait_processes_gone(f"--record {recording}") == []
    assert processes_naming(f"--model tiny --port {port}") == []  # the server went with the run


def test_stop_during_the_server_start_stops_the_start(tmp_path, env):
    port = free_port()
    script = tmp_path / "never_ready.sh"
    script.write_text("echo loading\nsleep 600\n")
    run = subprocess.Popen(
        [*RAMPWATCH, "run", "chat", "--serve", f"sh {script} --port {port}", "--headless", "--run-id", "5a5a5a5a",
         "--record", str(tmp_path / "run.rwrec")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        wait_listed(env, "5a5a5a5a", shown_state="starting")
        stopped = rampwatch(env, "stop", "5a5a")
        assert stopped.returncode == 130, stopped.stderr
        assert stopped.stdout.splitlines() == [
            "run 5a5a5a5a: stopping its server's start (nothing was sent yet)",
            "run 5a5a5a5a: finished, exit 130",  # nothing ran: nothing recorded
        ]
        assert not (tmp_path / "run.rwrec").exists()
        assert run.wait(30) == 130
        assert processes_naming(str(script)) == []
    finally:
        run.kill()
        run.wait()
