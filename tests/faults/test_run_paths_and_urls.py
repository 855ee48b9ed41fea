"""`rampwatch run`'s outputs never overwrite each other or an input, unwritable ones are
refused before the run starts, and a target given with `/v1` still finds its /metrics."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from rampwatch.app.session import serving_sim
from rampwatch.record.reader import open_recording
from rampwatch.sim.config import SimConfig

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

SHORT_RUN = ("--duration", "2", "--start-rps", "4", "--end-rps", "4", "--set", "workload.output_tokens=8")


def rampwatch_run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def sim_url():
    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        yield sim.url


def test_a_recording_named_json_keeps_its_own_file_beside_the_result(sim_url, tmp_path):
    recording = tmp_path / "run.json"
    proc = rampwatch_run("--target", sim_url, *SHORT_RUN, "--record", str(recording))
    assert proc.returncode == 0, proc.stderr
    assert open_recording(recording).requests  # still the recording, not the result JSON
    result = json.loads((tmp_path / "run.result.json").read_text())
    assert result["completed"] > 0
    assert f"result JSON: {tmp_path / 'run.result.json'}" in proc.stdout


@pytest.mark.parametrize(
    "make_args, message",
    [
        (
            lambda d: ("--record", str(d / "r.rwrec"), "--result-json", str(d / "r.rwrec")),
            "--result-json {d}/r.rwrec: is the recording (--record); give it another path",
        ),
        (
            lambda d: ("--no-record", "--result-json", str(d / "file" / "r.json")),
            "--result-json {d}/file/r.json: a parent of it is not a directory",
        ),
        (
            lambda d: ("--record", str(d / "file" / "r.rwrec")),
            "--record {d}/file/r.rwrec: a parent of it is not a directory",
        ),
        (lambda d: ("--no-record", "--result-json", str(d)), "--result-json {d}: is a directory"),
        (
            lambda d: ("--record", str(d / "scenario.yaml")),
            "--record {d}/scenario.yaml: is an input of this run; give the output another path",
        ),
    ],
)
def test_bad_outputs_are_refused_before_the_run(tmp_path, make_args, message):
    (tmp_path / "file").write_text("not a directory")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "name: s\nschedule: {kind: constant, rate: 1, duration_s: 1}\nworkload: {input_tokens: 8, output_tokens: 4}\n"
    )
    args = list(make_args(tmp_path))
    # the target is closed: a refusal that comes from the outputs comes before any connection
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            str(scenario),
            "--headless",
            "--target",
            closed_port_url(),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"rampwatch run: error: {message.format(d=tmp_path)}"
    assert not (tmp_path / "r.rwrec").exists()


def test_a_target_with_v1_scrapes_the_servers_metrics(sim_url, tmp_path):
    proc = rampwatch_run("--target", sim_url + "/v1/", *SHORT_RUN, "--no-record")
    assert proc.returncode == 0, proc.stderr
    assert f"against {sim_url} (model tiny); server metrics from {sim_url}/metrics" in proc.stdout
    assert "no server metrics" not in proc.stdout and "Max running requests:" in proc.stdout


def test_a_target_port_that_is_not_a_number_is_one_line():
    proc = rampwatch_run("--target", "http://user:pa55word@host:80a0", "--no-record")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("rampwatch run: error: --target 'http://<redacted>@host:80a0': ")
    assert "pa55word" not in proc.stderr and "Traceback" not in proc.stderr


def test_an_ipv6_target_runs(tmp_path):
    with serving_sim(SimConfig(hardware="instant", model="tiny"), host="::1") as sim:
        assert sim.url.startswith("http://[::1]:")
        proc = rampwatch_run("--target", sim.url, *SHORT_RUN, "--no-record")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Max running requests:" in proc.stdout


def test_credentials_in_urls_reach_no_output(sim_url, tmp_path):
    """`http://user:password@host` works (as basic auth) and its password is on no screen,
    log, recording, result JSON, report or HTML export."""
    password = "hunter2-s3cret"
    host = sim_url.removeprefix("http://")
    target = f"http://admin:{password}@{host}"
    recording, result_json = tmp_path / "run.rwrec", tmp_path / "result.json"
    proc = rampwatch_run(
        "--target",
        target,
        "--metrics-url",
        target + "/metrics",
        *SHORT_RUN,
        "--record",
        str(recording),
        "--result-json",
        str(result_json),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"against http://<redacted>@{host} " in proc.stdout and "Max running requests:" in proc.stdout
    html = tmp_path / "run.html"
    exported = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "export", str(recording), "--format", "html", "-o", str(html)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "report", str(recording)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert exported.returncode == 0 and report.returncode == 0, exported.stderr + report.stderr
    recorded = open_recording(recording)
    assert recorded.header.target == f"http://<redacted>@{host}"
    assert recorded.requests and all(r.ok for r in recorded.requests)
    recorded_text = json.dumps(
        [
            recorded.header.to_dict(),
            [e.to_dict() for e in recorded.events],
            [s.to_dict() for s in recorded.samples],
            [r.to_dict() for r in recorded.requests],
        ]
    )
    outputs = {
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "report": report.stdout + report.stderr,
        "recording": recorded_text,
        "result JSON": result_json.read_text(),
        "HTML": html.read_text(),
    }
    leaked = [name for name, text in outputs.items() if password in text]
    assert leaked == []
