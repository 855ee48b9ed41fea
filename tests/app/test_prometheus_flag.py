"""`rampwatch run --prometheus-port` as a user runs it: a detached run serves its figures
while it runs (scraped and parsed with prometheus_client's parser, labelled with the
run's id), and a port in use is one line naming the flag (exit 2)."""

from __future__ import annotations

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
    with pytest.raises(OSError):  # the run's process has gone, and its server
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_a_port_in_use_is_one_line_naming_the_flag(env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = rampwatch(
            env, "run", "random", *SIM_FLAGS, "--duration", "2", "--headless", "--no-record",
            "--prometheus-port", str(port),
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith(f"rampwatch run: error: --prometheus-port {port}: cannot serve on 127.0.0.1:{port} (")
    assert "Traceback" not in out.stderr


def test_a_bad_port_is_refused_by_the_parser(env):
    out = rampwatch(env, "run", "random", "--prometheus-port", "70000")
    assert out.returncode == 2 and "--prometheus-port: '70000' is not a port from 1 to 65535" in out.stderr
