"""`rampwatch run --prometheus-port` as a user runs it: a detached run serves its figures
while it runs (scraped and parsed with prometheus_client's parser, labelled with the
run's id), and a port in use is one line naming the flag (exit 2)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import free_port

pytestmark = pytest.mark.slow

RAMPWATCH = [sys.executable, "-m", "rampwatch.app.cli"]
SIM_FLAGS = ["--sim-hardware", "instant", "--sim-model", "tiny"]


@pytest.fixture
def env() -> Iterator[dict[str, str]]:
    # a short runs directory of the test's own (a Unix socket's path has at most 107 bytes)
    with tempfile.TemporaryDirectory(prefix="rw-", dir="/tmp") as runtime:
        os.chmod(runtime, 0o700)
        yield {**os.environ, "XDG_RUNTIME_DIR": runtime}


def rampwatch(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*RAMPWATCH, *args], capture_output=True, text=True, env=env, timeout=timeout)


def scrape_until_requests(port: int, timeout_s: float = 30.0) -> dict[str, dict]:
    """The first scrape that counts an ended request: ``{sample name: labels and value}``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                text = answer.read().decode()
            families = list(text_string_to_metric_families(text))
            got: dict[str, dict] = {}
            for sample in (s for f in families for s in f.samples):  # a name's values summed
                seen = got.setdefault(sample.name, {"labels": sample.labels, "value": 0.0})
                seen["value"] += sample.value
            if got.get("rampwatch_requests_total", {}).get("value", 0) > 0:
                return got
        except (urllib.error.URLError, ConnectionError):
            pass  # not serving yet (the detached process is starting)
        if time.monotonic() > deadline:
            raise AssertionError(f"no ended request scraped from port {port} in {timeout_s} s")
        time.sleep(0.2)  # another process's server: polled


def test_a_detached_run_serves_its_figures_while_it_runs(tmp_path, env):
    port = free_port()
    recording = tmp_path / "run.rwrec"
    started = rampwatch(
        env, "run", "random", *SIM_FLAGS, "--duration", "60", "--start-rps", "5", "--end-rps", "5",
        "--record", str(recording), "--detach", "--prometheus-port", str(port),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run_id = started.stdout.splitlines()[0].split()[5]
    try:
        got = scrape_until_requests(port)
        assert got["rampwatch_run_info"]["labels"]["run_id"] == run_id
        assert got["rampwatch_requests_total"]["labels"]["scenario"] == "random"
        assert got["rampwatch_run_done"]["value"] == 0
    finally:
        stopped = rampwatch(env, "stop", run_id)
    assert stopped.returncode == 130, stopped.stderr  # the run's own exit code: stopped
    # The run has finished (`stop` waited for its exit code), its port serves on
    # (--prometheus-linger): one scrape reads the final figures, then the port closes.
    final = scrape_until_requests(port)
    assert final["rampwatch_run_done"]["value"] == 1
    summary = read_summary(recording)
    assert final["rampwatch_requests_total"]["value"] == summary["completed"] + summary["failed"] + summary["cancelled"]
    wait_closed(port)


def read_summary(recording) -> dict:
    out = subprocess.run([*RAMPWATCH, "report", str(recording), "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_closed(port: int, timeout_s: float = 10.0) -> None:
    """The port refuses within ``timeout_s`` (its process has let it go)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).close()
        except OSError:
            return
        assert time.monotonic() < deadline, f"port {port} still served"
        time.sleep(0.2)  # another process's port: polled


def test_a_headless_run_serves_its_final_figures_until_scraped(env):
    port = free_port()
    run = subprocess.Popen(
        [*RAMPWATCH, "run", "random", *SIM_FLAGS, "--duration", "2", "--start-rps", "5", "--end-rps", "5",
         "--headless", "--no-record", "--prometheus-port", str(port), "--prometheus-linger", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        got = scrape_until_requests(port)
        while got["rampwatch_run_done"]["value"] != 1:  # until the run has ended
            got = scrape_until_requests(port)
        out, err = run.communicate(timeout=30)  # well before the 120 s bound: the scrape ended it
    finally:
        run.kill()
    assert run.returncode == 0, err
    completed = int(next(line for line in out.splitlines() if "Successful requests:" in line).split()[-1])
    assert got["rampwatch_requests_total"]["value"] >= completed > 0
    assert "Traceback" not in err


def test_an_unscraped_run_says_it_waits_and_ends_at_the_bound(env):
    port = free_port()
    started = time.monotonic()
    out = rampwatch(
        env, "run", "random", *SIM_FLAGS, "--duration", "1", "--headless", "--no-record",
        "--prometheus-port", str(port), "--prometheus-linger", "2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stderr.splitlines() if "--prometheus-linger" in line]
    assert said == [
        f"rampwatch run: --prometheus-port: serving the final figures on 127.0.0.1:{port} until a scrape reads "
        "them (at most 2 s after the run's end, --prometheus-linger; Ctrl-C skips)"
    ]
    assert time.monotonic() - started < 50


def test_linger_without_a_port_is_one_line(env):
    out = rampwatch(env, "run", "random", "--prometheus-linger", "5")
    assert out.returncode == 2 and "--prometheus-linger 5: needs --prometheus-port PORT" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_port_in_use_is_one_line_naming_the_flag(env, tmp_path):
    """Said in the plan: no server (here the embedded simulator) started, no recording or
    .server.log left behind (review rv-user29)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = rampwatch(
            env, "run", "random", *SIM_FLAGS, "--duration", "2", "--headless",
            "--record", str(tmp_path / "a.rwrec"), "--prometheus-port", str(port),
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"rampwatch run: error: --prometheus-port {port}: cannot serve on 127.0.0.1:{port} (")
    assert out.stdout == "" and list(tmp_path.iterdir()) == []  # nothing started, nothing written
    assert "Traceback" not in out.stderr


def test_a_bad_port_is_refused_by_the_parser(env):
    out = rampwatch(env, "run", "random", "--prometheus-port", "70000")
    assert out.returncode == 2 and "--prometheus-port: '70000' is not a port from 1 to 65535" in out.stderr
