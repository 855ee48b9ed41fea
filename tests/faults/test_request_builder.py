"""The process that builds a run's requests ahead, killed mid-run: the run stops with one
line naming it, the summary, result JSON and recording kept, no request lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rampwatch.record.reader import open_recording

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

REPO = Path(__file__).resolve().parents[2]


def builder_pid(parent: int, deadline: float) -> int:
    """The request builder among ``parent``'s children, once it runs."""
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == parent and b"rampwatch.loadgen.workload.requests_ahead" in cmdline:
                return int(entry.name)
        time.sleep(0.05)
    raise AssertionError("no request builder process started")


@pytest.mark.timing
def test_a_killed_request_builder_stops_the_run_with_one_line(tmp_path):
    recording, result = tmp_path / "run.rwrec", tmp_path / "run.json"
    argv = ["run", "random", "--headless", "--sim-hardware", "instant", "--record", str(recording)]
    argv += ["--result-json", str(result), "--progress-interval", "1"]
    # 2,048-token prompts cost ~1 ms each to build: the builder process builds them
    argv += ["--set", "schedule.kind=constant", "--set", "schedule.rate=60", "--set", "schedule.duration_s=60"]
    argv += ["--set", "workload.input_tokens=2048", "--set", "workload.output_tokens=4"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rampwatch.app.cli", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        builder = builder_pid(proc.pid, time.monotonic() + 60)
        assert proc.stdout is not None
        seen = []
        while not (line := proc.stdout.readline()).startswith("["):  # the load's first progress line
            assert line, "".join(seen)
            seen.append(line)
        os.kill(builder, signal.SIGKILL)  # as the OOM killer would, mid-run
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.splitlines()[-2] == "rampwatch run: the request builder process exited: the run stops here"
    assert "Successful requests:" in out and json.loads(result.read_text())["completed"] > 0
    with open_recording(recording) as rec:
        assert rec.finished
        ids = sorted(r.id for r in rec.requests)
        assert ids == list(range(len(ids)))  # every request sent is recorded


# The run's CLI with the factory's 30th request failing (as a bug, a dataset row it cannot
# use or an image's MemoryError would): cheap prompts are built on the run's loop.
FAILING_CLI = """
import sys
from rampwatch.app.cli import main
from rampwatch.loadgen.workload.request_factory import RequestFactory

built = RequestFactory.next_request
count = 0

def next_request(self):
    global count
    count += 1
    if count == 30:
        raise KeyError("prompt")
    return built(self)

RequestFactory.next_request = next_request
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timing
def test_a_request_that_cannot_be_built_stops_the_run_with_one_line(tmp_path):
    recording, result = tmp_path / "run.rwrec", tmp_path / "run.json"
    argv = ["run", "random", "--headless", "--sim-hardware", "instant", "--record", str(recording)]
    argv += ["--result-json", str(result)]
    argv += ["--set", "schedule.kind=constant", "--set", "schedule.rate=40", "--set", "schedule.duration_s=60"]
    argv += ["--set", "workload.input_tokens=16", "--set", "workload.output_tokens=4"]
    proc = subprocess.run(
        [sys.executable, "-c", FAILING_CLI, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr
    line = "rampwatch run: building request 30 failed: KeyError: 'prompt': the run stops here"
    assert line in proc.stderr.splitlines()
    assert "Successful requests:" in proc.stdout and json.loads(result.read_text())["completed"] == 29
    with open_recording(recording) as rec:
        assert rec.finished
        assert sorted(r.id for r in rec.requests) == list(range(29))


# The same with a session workload: session 2's second turn fails to build, in the session's
# own task (issue 28 left it there: the task died, the run went on without a word).
FAILING_TURN_CLI = """
import sys
from rampwatch.app.cli import main
from rampwatch.loadgen.workload.sessions import Conversation

built = Conversation.next_request

def next_request(self):
    if self.id == 2 and self.turn == 1:
        self.turn += 1
        raise KeyError("prompt")
    return built(self)

Conversation.next_request = next_request
sys.exit(main(sys.argv[1:]))
"""


def test_a_session_turn_that_cannot_be_built_stops_the_run_with_one_line(tmp_path):
    recording, result = tmp_path / "run.rwrec", tmp_path / "run.json"
    argv = ["run", "multi-turn-chat", "--headless", "--sim-hardware", "instant", "--sim-model", "tiny"]
    argv += ["--record", str(recording), "--result-json", str(result)]
    argv += ["--set", "schedule={kind: constant, rate: 5, duration_s: 60}", "--set", "workload.sessions.think_time_s=0"]
    proc = subprocess.run(
        [sys.executable, "-c", FAILING_TURN_CLI, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "exception was never retrieved" not in proc.stderr
    line = "rampwatch run: building session 2's turn 2 failed: KeyError: 'prompt': the run stops here"
    assert line in proc.stderr.splitlines()
    assert "Successful requests:" in proc.stdout and json.loads(result.read_text())["completed"] > 0
    with open_recording(recording) as rec:
        assert rec.finished and rec.duration_s < 50  # stopped, not run to its 60 s
