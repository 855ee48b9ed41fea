"""`rampwatch sim` as a process, and EmbeddedSim."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from rampwatch.app.cli import main as rampwatch_main
from rampwatch.core.errors import UserError
from rampwatch.sim.config import SimConfig
from rampwatch.sim.embedded import EmbeddedSim

ROOT = Path(__file__).resolve().parents[2]


def start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rampwatch.app.cli", "sim", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_cli_serves_prints_banner_and_stops_cleanly_on_sigterm():
    proc = start_cli("--hardware", "instant", "--model", "tiny", "--port", "0", "--served-model-name", "demo")
    try:
        line = proc.stdout.readline()
        assert line.startswith("rampwatch sim: serving demo on http://127.0.0.1:")
        assert "(hardware instant, " in line and " KV blocks)" in line
        url = line.split(" on ")[1].split(" ")[0]
        assert not url.endswith(":0")
        body = json.dumps({"model": "demo", "prompt": "hi", "max_tokens": 3, "stream": True}).encode()
        with urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=body), timeout=10) as r:
            assert r.read().endswith(b"data: [DONE]\n\n")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_cli_sigint_exits_zero():
    proc = start_cli("--hardware", "instant", "--model", "tiny", "--port", "0")
    try:
        assert "serving" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0 and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--hardware", "b200"], "--hardware 'b200': unknown hardware preset; valid values: a100-40g"),
        (["--model", "gpt"], "--model 'gpt'"),
        (["--max-num-seqs", "0"], "--max-num-seqs 0"),
    ],
)
def test_bad_flags_are_user_errors(capsys, args, expected):
    assert rampwatch_main(["sim", *args, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rampwatch sim: error: ") and expected in err


def test_embedded_sim_starts_serves_and_stops():
    with EmbeddedSim(SimConfig(hardware="instant", model="tiny")) as sim:
        assert sim.url.startswith("http://127.0.0.1:") and sim.pid > 0
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=5) as r:
            assert json.loads(r.read())["data"][0]["id"] == "tiny"
        proc = sim.process
    assert proc.poll() == 0


def test_embedded_sim_rejects_bad_preset_in_parent():
    with pytest.raises(UserError, match="--hardware"):
        EmbeddedSim(SimConfig(hardware="nope"))


def test_embedded_child_exits_when_parent_dies():
    code = (
        "import time\n"
        "from rampwatch.sim.embedded import EmbeddedSim\n"
        "from rampwatch.sim.config import SimConfig\n"
        "sim = EmbeddedSim(SimConfig(hardware='instant', model='tiny')).start()\n"
        "print(sim.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    parent.kill()  # no cleanup runs in the parent
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        # a zombie of an already-reaped parent is adopted by init; check its state
        try:
            if Path(f"/proc/{child_pid}/stat").read_text().split()[2] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.1)
    os.kill(child_pid, signal.SIGKILL)
    pytest.fail("embedded simulator outlived its parent")


def test_embedded_sim_dies_with_its_parent_even_while_a_forked_child_holds_its_stdin():
    """`rampwatch run` forks its run process after starting the simulator, so the run
    process inherits the simulator's stdin pipe: `kill -9` of rampwatch must still end the
    simulator at once, not when the run process finally lets go of the pipe."""
    code = (
        "import os, sys, time\n"
        "from rampwatch.sim.embedded import EmbeddedSim\n"
        "from rampwatch.sim.config import SimConfig\n"
        "sim = EmbeddedSim(SimConfig(hardware='instant', model='tiny')).start()\n"
        "holder = os.fork()\n"
        "if holder == 0:\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(sim.pid, holder, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    sim_pid, holder_pid = map(int, parent.stdout.readline().split())
    try:
        parent.kill()
        parent.wait()
        assert wait_until_gone(sim_pid, timeout=5.0), "embedded simulator outlived its parent"
        os.kill(holder_pid, 0)  # the pipe's other holder is still alive: it was not the EOF
    finally:
        for pid in (sim_pid, holder_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True
        if state == "Z":  # exited; its reaper is init now
            return True
        time.sleep(0.05)
    return False
