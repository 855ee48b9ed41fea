"""`rampwatch run --serve COMMAND` headless, as a process: the server is started, waited
for, recorded, and stopped on every way out; the embedded simulator is the same path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.record.reader import open_recording
from tests.processes import free_port, group_members, wait_group_gone

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

REPO = Path(__file__).resolve().parents[2]
SIM = "rampwatch sim --hardware instant --model tiny"
# ~30 ms per decode step: a run that is still busy when a test interrupts it
SLOW_SIM = "rampwatch sim --hardware l4 --model llama-3.1-8b-fp8"


def run_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rampwatch.app.cli",
        "run",
        "chat",
        "--headless",
        "--record",
        str(tmp_path / "run.rwrec"),
        "--progress-interval",
        "100",
        *extra,
    ]


def rampwatch(tmp_path: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(run_args(tmp_path, *extra), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def server_pid(stdout: str) -> int:
    line = next(line for line in stdout.splitlines() if line.startswith("server: starting (pid "))
    return int(line.removeprefix("server: starting (pid ").split(")")[0])


def start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int, list[str]]:
    """A headless run in the background, once its load has run a second (its first
    progress line): (process, the server's pid, the lines it printed so far)."""
    proc = subprocess.Popen(
        run_args(tmp_path, *extra, "--progress-interval", "1"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("["):
            return proc, server_pid("".join(lines)), lines
    proc.kill()
    pytest.fail(f"the run did not start: {''.join(lines)} {proc.stderr.read() if proc.stderr else ''}")


def test_serve_starts_records_and_stops_the_server(tmp_path):
    port = free_port()
    out = rampwatch(tmp_path, "--serve", f"{SIM} --port {port} --max-num-seqs 32", "--duration", "3")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"server: starting (pid {server_pid(out.stdout)}) …"
    assert lines[1].startswith("server: ready in ") and lines[1].endswith(" s")
    assert f"against http://127.0.0.1:{port} " in lines[2]
    assert f"server log to {tmp_path / 'run.rwrec.server.log'}" in lines
    assert wait_group_gone(server_pid(out.stdout))
    header = open_recording(tmp_path / "run.rwrec").header
    managed = header.server_info["managed_server"]
    assert managed["command"] == f"{SIM} --port {port} --max-num-seqs 32"
    assert managed["engine_args"] == {"hardware": "instant", "model": "tiny", "port": str(port), "max_num_seqs": "32"}
    assert 0 < managed["startup_s"] < 60
    assert header.options["serve"] == managed["command"]
    log = (tmp_path / "run.rwrec.server.log").read_text()
    assert log.startswith(f"$ {SIM} --port {port}") and f"rampwatch sim: serving tiny on http://127.0.0.1:{port}" in log


def test_without_serve_or_target_the_embedded_simulator_takes_the_same_path(tmp_path):
    out = rampwatch(tmp_path, "--sim-hardware", "instant", "--sim-model", "tiny", "--duration", "2")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("server: starting (pid ")
    assert wait_group_gone(server_pid(out.stdout))
    managed = open_recording(tmp_path / "run.rwrec").header.server_info["managed_server"]
    assert managed["command"].startswith("rampwatch sim --hardware instant --model tiny --seed ")
    assert managed["engine_args"]["hardware"] == "instant"


def test_a_bad_simulator_preset_is_one_line_naming_the_run_flag(tmp_path):
    out = rampwatch(tmp_path, "--sim-hardware", "nope", "--duration", "2")
    assert out.returncode == 2
    assert out.stderr.startswith("rampwatch run: error: --sim-hardware 'nope': unknown hardware preset")
    assert out.stdout == "" and "Traceback" not in out.stderr


def test_a_port_in_use_is_one_line_and_nothing_starts(tmp_path):
    port = free_port()
    with subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as busy:
        try:
            assert busy.stdout is not None and "Serving HTTP" in busy.stdout.readline()
            out = rampwatch(tmp_path, "--serve", f"{SIM} --port {port}", "--duration", "2")
        finally:
            busy.kill()
    assert out.returncode == 2
    assert out.stderr == (
        f"rampwatch run: error: --serve: 127.0.0.1:{port} is already in use; stop that server or pass --port\n"
    )
    assert not (tmp_path / "run.rwrec").exists()


def test_a_server_that_exits_during_startup_shows_its_log_and_exit_code(tmp_path):
    out = rampwatch(tmp_path, "--serve", f"{SIM} --port {free_port()} --max-num-seqs 0", "--duration", "2")
    assert out.returncode == 5
    err = out.stderr.splitlines()
    assert err[0].startswith("server log (last ") and "--max-num-seqs 0" in out.stderr
    assert err[-1] == (
        "rampwatch run: error: server exited with code 2 during startup: "
        "rampwatch sim: error: --max-num-seqs 0: must be >= 1"
    )
    assert "Traceback" not in out.stderr


def test_a_server_killed_mid_run_fails_the_run_with_its_reason_recorded(tmp_path):
    proc, pid, _ = start(tmp_path, "--serve", f"{SLOW_SIM} --port {free_port()}", "--duration", "60")
    os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 5
    assert "============ Serving Benchmark Result ============" in stdout  # the summary is kept
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("rampwatch run: server exited with code 137 (SIGKILL) during the run: ")
    assert last.endswith(f"(exit 5; server log: {tmp_path / 'run.rwrec.server.log'})")
    assert "server log (last 1 lines):" in stderr and "Traceback" not in stderr
    recording = open_recording(tmp_path / "run.rwrec")
    (error,) = [e for e in recording.events if e.kind == "error"]
    assert error.data["server_exit_code"] == 137
    assert error.message.startswith("server exited with code 137 (SIGKILL) during the run: ")
    assert error.data["server_log_tail"][-1].startswith("rampwatch sim: serving ")
    assert json.loads((tmp_path / "run.json").read_text())["num_prompts"] >= 0  # the result JSON is kept


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_drain_print_the_summary_and_stop_the_server(tmp_path, sig):
    proc, pid, _ = start(
        tmp_path, "--serve", f"{SLOW_SIM} --port {free_port()}", "--duration", "60", "--stop-grace", "1"
    )
    assert group_members(pid)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "stopping: no new requests" in stderr and "Traceback" not in stderr
    assert "============ Serving Benchmark Result ============" in stdout
    assert wait_group_gone(pid)


def test_a_signal_during_the_server_start_stops_it(tmp_path):
    # --never-ready stand-in: a server that starts and never answers
    script = tmp_path / "silent.py"
    script.write_text("import time\nprint('loading', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen(
        run_args(tmp_path, "--serve", f"{sys.executable} {script} --port {free_port()}"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    pid = server_pid(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert stderr == "rampwatch run: interrupted\n"
    assert wait_group_gone(pid)


def test_secrets_in_the_serve_command_stay_out_of_the_recording_and_log(tmp_path):
    secret = "sk-serve-secret-9f8e7d"
    out = rampwatch(tmp_path, "--serve", f"HF_TOKEN={secret} {SIM} --port {free_port()}", "--duration", "1")
    assert out.returncode == 0, out.stderr
    assert secret not in out.stdout + out.stderr
    header = open_recording(tmp_path / "run.rwrec").header
    assert secret not in json.dumps(header.to_dict())
    assert header.server_info["managed_server"]["command"].startswith("HF_TOKEN='<redacted>' rampwatch sim")
    log = (tmp_path / "run.rwrec.server.log").read_text()
    assert log.startswith("$ HF_TOKEN='<redacted>' rampwatch sim") and secret not in log


def test_a_slow_start_says_every_interval_how_long_so_far_and_the_last_log_line(tmp_path):
    import io

    from rampwatch.app.session import start_server
    from rampwatch.core.errors import TargetUnreachable
    from rampwatch.loadgen.server.managed import ManagedServer, ServeCommand

    script = tmp_path / "silent.py"
    script.write_text("import time\nprint('loading weights', flush=True)\ntime.sleep(600)\n")
    server = ManagedServer(ServeCommand.parse(f"{sys.executable} {script} --port {free_port()}"))
    out = io.StringIO()
    with pytest.raises(TargetUnreachable):
        start_server(server, timeout_s=2.0, out=out, progress_interval_s=0.5)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"server: starting (pid {server.pid}) …"
    progress = [line for line in lines[1:] if line.startswith("server: still starting (")]
    assert progress and progress[-1].endswith(" s); last log line: loading weights")
    assert wait_group_gone(server.pid)


def test_a_failed_start_is_recorded_with_its_reason(tmp_path):
    """Nothing ran, but the recording says why: the command, its arguments and one error
    event with the server's exit code and last log lines; `rampwatch report` prints it."""
    out = rampwatch(tmp_path, "--serve", f"{SIM} --port {free_port()} --max-num-seqs 0", "--duration", "2")
    assert out.returncode == 5
    assert f"recording: {tmp_path / 'run.rwrec'} (the failed start)" in out.stderr.splitlines()
    recording = open_recording(tmp_path / "run.rwrec")
    managed = recording.header.server_info["managed_server"]
    assert managed["engine_args"]["max_num_seqs"] == "0" and managed["startup_s"] is None
    (error,) = [e for e in recording.events if e.kind == "error"]
    assert error.message == (
        "the server did not start: server exited with code 2 during startup: "
        "rampwatch sim: error: --max-num-seqs 0: must be >= 1"
    )
    assert error.data["server_exit_code"] == 2
    assert error.data["server_log_tail"][-1] == "rampwatch sim: error: --max-num-seqs 0: must be >= 1"
    assert not any(f.count for f in recording.request_frames)  # nothing was sent
    report = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "report", str(tmp_path / "run.rwrec")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "the server did not start: server exited with code 2" in report.stdout + report.stderr
    assert "Traceback" not in report.stderr
