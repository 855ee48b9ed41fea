"""A run's files on a shared machine: two runs never write one recording, an existing one
is replaced only with --force, a refused start leaves nothing, and every file that may
hold prompts or server text is 0600 whatever the umask."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.app.session import serving_sim
from rampwatch.core.errors import UserError
from rampwatch.core.files import claim_outputs, open_private, private_file
from rampwatch.record.reader import open_recording
from rampwatch.sim.config import SimConfig

SHORT_RUN = ("--duration", "2", "--start-rps", "4", "--end-rps", "4", "--set", "workload.output_tokens=8")
DATA = Path(__file__).resolve().parents[1] / "data"


def run_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", *args]


def rampwatch_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(run_command(*args), capture_output=True, text=True, timeout=60)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def sim_url():
    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        yield sim.url


@pytest.fixture
def umask_022():
    old = os.umask(0o022)  # the usual one: files it creates are world-readable
    yield
    os.umask(old)


@pytest.mark.slow
def test_a_second_run_onto_a_recording_being_written_is_refused_and_the_first_is_kept(sim_url, tmp_path, umask_022):
    recording = tmp_path / "same.rwrec"
    first = subprocess.Popen(
        # Long enough to outlast the two runs below on a busy machine; stopped after them.
        run_command("--target", sim_url, *SHORT_RUN, "--duration", "120", "--record", str(recording)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        # Once it says where it records, its outputs are claimed and its load is starting.
        for line in first.stdout:
            if line.startswith("recording to "):
                break
        second = rampwatch_run("--target", sim_url, *SHORT_RUN, "--record", str(recording))
        forced = rampwatch_run("--target", sim_url, *SHORT_RUN, "--record", str(recording), "--force")
        first.send_signal(signal.SIGINT)  # a graceful stop: the summary and files are written
        rest, err = first.communicate(timeout=60)
    finally:
        first.kill()
        first.wait()
    for refused in (second, forced):  # --force never takes a file another run writes
        assert refused.returncode == 2
        assert refused.stderr == (
            f"rampwatch run: error: --record {recording}: another rampwatch run is writing it; "
            "give this run another path\n"
        )
    assert first.returncode == 130, err  # stopped before the end of its schedule
    with open_recording(recording) as kept:  # whole: every block intact, every request there
        assert kept.requests and not kept.warnings
    result = json.loads((tmp_path / "same.json").read_text())
    assert result["completed"] == len(kept.requests)
    # What may hold prompts and server text is the user's alone.
    for name in ("same.rwrec", "same.json"):
        assert mode(tmp_path / name) == 0o600, name


@pytest.mark.slow
@pytest.mark.parametrize(
    "existing, flag",
    [("r.rwrec", "--record"), ("r.json", "--result-json"), ("r.rwrec.server.log", "--server-log")],
)
def test_an_existing_output_is_never_replaced_without_force(tmp_path, existing, flag):
    """The recording, the result JSON beside it and the embedded server's log beside it."""
    old = tmp_path / existing
    old.write_text("an earlier run's file\n")
    proc = rampwatch_run(*SHORT_RUN, "--record", str(tmp_path / "r.rwrec"))
    assert proc.returncode == 2
    assert (
        proc.stderr == f"rampwatch run: error: {flag} {old}: exists; pass --force to replace it, or give another path\n"
    )
    assert old.read_text() == "an earlier run's file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]  # nothing else written


@pytest.mark.slow
def test_force_replaces_an_earlier_recording(sim_url, tmp_path, umask_022):
    recording = tmp_path / "r.rwrec"
    recording.write_text("an earlier run's file\n")
    recording.chmod(0o644)
    proc = rampwatch_run("--target", sim_url, *SHORT_RUN, "--record", str(recording), "--force")
    assert proc.returncode == 0, proc.stderr
    with open_recording(recording) as replaced:
        assert replaced.requests
    assert mode(recording) == 0o600


@pytest.mark.slow
def test_a_run_recorded_to_dev_null_runs_as_without_a_recording(sim_url, tmp_path):
    """`--record /dev/null` (cannot be read back): the figures come from a scratch
    recording, as with --no-record; no result JSON beside the device (/dev/null.json)."""
    before = set(Path(os.path.dirname(os.devnull)).iterdir())
    proc = rampwatch_run("--target", sim_url, *SHORT_RUN, "--record", os.devnull)
    assert proc.returncode == 0, proc.stderr
    assert "cannot read the run's records back" not in proc.stderr and "Successful requests:" in proc.stdout
    assert "result JSON:" not in proc.stdout
    assert set(Path(os.path.dirname(os.devnull)).iterdir()) == before
    with_json = rampwatch_run(
        "--target", sim_url, *SHORT_RUN, "--record", os.devnull, "--result-json", str(tmp_path / "r.json")
    )
    assert with_json.returncode == 0, with_json.stderr
    assert json.loads((tmp_path / "r.json").read_text())["completed"] > 0


@pytest.mark.slow
def test_a_refused_start_leaves_no_file(tmp_path):
    """The outputs are claimed before the run starts: a start that fails then (no server
    at the target) removes what the claim created."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    proc = rampwatch_run("--target", closed, "--model", "m", *SHORT_RUN, "--record", str(tmp_path / "r.rwrec"))
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_claims_are_exclusive_and_let_go(tmp_path):
    path = tmp_path / "r.rwrec"
    claim = claim_outputs([("--record", path)], force=False)
    with pytest.raises(UserError, match="another rampwatch run is writing it"):
        claim_outputs([("--record", path)], force=True)
    claim.release()
    assert not path.exists()  # created by the claim, never written: removed
    path.touch()  # an empty file no run holds (a run killed before it wrote): taken
    claim_outputs([("--record", path)], force=False).release()
    assert not path.exists()
    again = claim_outputs([("--record", path)], force=False)
    path.write_bytes(b"written")
    again.release()
    assert path.read_bytes() == b"written"  # written: kept
    with pytest.raises(UserError, match="exists; pass --force"):
        claim_outputs([("--record", path)], force=False)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
@pytest.mark.parametrize("before", [None, 0o644, 0o666])
def test_private_files_are_0600_whatever_the_umask_or_their_old_mode(tmp_path, umask, before):
    path = tmp_path / "f"
    if before is not None:
        path.write_text("old")
        path.chmod(before)
    old = os.umask(umask)
    try:
        with private_file(path, "a") as fh:
            fh.write("x")
        os.close(open_private(tmp_path / "g"))
    finally:
        os.umask(old)
    assert mode(path) == 0o600
    assert mode(tmp_path / "g") == 0o600


@pytest.mark.parametrize(
    "fmt, names", [("json", ["x.json"]), ("csv", ["x-requests.csv", "x-series.csv"]), ("html", ["x.html"])]
)
def test_exports_are_0600(tmp_path, umask_022, fmt, names):
    from rampwatch.app.cli import main

    assert main(["export", str(DATA / "small.rwrec"), "--format", fmt, "-o", str(tmp_path / f"x.{fmt}")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    for name in names:
        assert mode(tmp_path / name) == 0o600, name


@pytest.mark.slow
def test_a_recording_onto_a_pipe_or_the_runs_own_output_is_one_line(tmp_path):
    fifo = tmp_path / "rec.fifo"
    os.mkfifo(fifo)
    proc = rampwatch_run("--record", str(fifo))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"rampwatch run: error: --record {fifo}: a terminal or a pipe "
        "(a recording is binary, read back after the run); give a file"
    )
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:  # `--record /dev/stdout > out.txt`: the summary and the recording in one file
        own = subprocess.run(
            run_command("--record", "/dev/stdout"), stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60
        )
    assert own.returncode == 2 and "is this run's own output" in own.stderr and out.read_text() == ""


@pytest.mark.slow
def test_force_replaces_the_server_log_too(tmp_path):
    """The docs say --force replaces the run's outputs: the server log was appended to, an
    earlier run's lines kept above the new ones."""
    from tests.processes import free_port

    recording = tmp_path / "r.rwrec"
    log = tmp_path / "r.rwrec.server.log"
    recording.write_text("an earlier run's file\n")
    log.write_text("$ an earlier run's server\nits lines\n")
    serve = f"{sys.executable} -m rampwatch.app.cli sim --hardware instant --model tiny --port {free_port()}"
    proc = rampwatch_run("--serve", serve, *SHORT_RUN, "--record", str(recording), "--force")
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert "an earlier run's server" not in text and text.startswith("$ ") and "--hardware instant" in text
