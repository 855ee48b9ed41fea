"""The runs registry (`rampwatch ps`, ids, the runs directory's permissions) and the
choices of `rampwatch attach` and `rampwatch run --detach` that need no process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rampwatch.app import runs
from rampwatch.app.attach import what_to_open
from rampwatch.app.detach import child_argv
from rampwatch.core.errors import UserError

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return runs.checked_dir(tmp_path / "runs")


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module", autouse=True)
def a_run_process() -> Iterator[None]:
    """A live process named like a run's, whose pid the states below use."""
    global LIVE_PID
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "rampwatch"])
    LIVE_PID = proc.pid
    yield
    proc.kill()
    proc.wait()


LIVE_PID = 0


def state(run_id: str, **fields) -> runs.RunState:
    values = {"pid": LIVE_PID, "scenario": "chat", "target": "http://h:1", "started": 1000.0, **fields}
    return runs.RunState(id=run_id, **values)


def test_the_runs_directory_is_made_0700(tmp_path):
    path = runs.checked_dir(tmp_path / "a" / "runs")
    assert path.is_dir() and (path.stat().st_mode & 0o777) == 0o700


def test_a_runs_directory_others_may_enter_is_refused_with_one_line(tmp_path):
    path = tmp_path / "runs"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    with pytest.raises(UserError) as err:
        runs.checked_dir(path)
    assert str(err.value) == (
        f"runs directory {path}: mode 0755 lets other users in (want 0700); fix it with chmod 700 {path}"
    )


def test_a_runs_directory_of_another_user_is_refused(tmp_path, monkeypatch):
    path = runs.checked_dir(tmp_path / "runs")
    owner = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: owner + 1)
    with pytest.raises(UserError, match=rf"runs directory {path}: belongs to another user \(uid {owner}\)"):
        runs.checked_dir(path)


def test_a_file_in_place_of_the_runs_directory_is_refused(tmp_path):
    path = tmp_path / "runs"
    path.write_text("")
    with pytest.raises(UserError, match="not a directory"):
        runs.checked_dir(path, create=False)


def test_the_runs_directory_follows_xdg_runtime_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert runs.runtime_dir() == tmp_path / "rampwatch"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert runs.runtime_dir() == Path(f"/tmp/rampwatch-{os.getuid()}")


def test_state_files_are_0600_and_read_back(directory):
    runs.write_state(state("abc12345", recording="/r.rwrec"), directory)
    path = runs.state_path("abc12345", directory)
    assert path.stat().st_mode & 0o777 == 0o600
    assert runs.read_state(path) == state("abc12345", recording="/r.rwrec")
    runs.update_state("abc12345", directory, run_state="holding", rate_rps=2.5)
    again = runs.read_state(path)
    assert again is not None and (again.run_state, again.rate_rps) == ("holding", 2.5)
    assert runs.update_state("nosuchid", directory, run_state="x") is None


def test_a_state_file_of_a_newer_version_with_more_keys_still_reads(directory):
    runs.state_path("abc12345", directory).write_text(
        '{"id": "abc12345", "pid": 1, "scenario": "chat", "target": "t", "workers": 4}'
    )
    loaded = runs.read_state(runs.state_path("abc12345", directory))
    assert loaded is not None and loaded.id == "abc12345" and loaded.state == runs.STARTING


def test_ids_resolve_by_unambiguous_prefix(directory):
    for run_id in ("ab120000", "ab340000", "cd000000"):
        runs.write_state(state(run_id), directory)
    assert runs.resolve("cd", directory).id == "cd000000"
    assert runs.resolve("ab12", directory).id == "ab120000"
    with pytest.raises(UserError, match=r"run id 'ab': names 2 runs \(ab120000, ab340000\); give more of it"):
        runs.resolve("ab", directory)
    with pytest.raises(UserError, match=r"run id 'ef': no such run of yours on this host \(see rampwatch ps\)"):
        runs.resolve("ef", directory)
    with pytest.raises(UserError, match="not a run id"):
        runs.resolve("../x", directory)


def test_a_pid_now_of_another_program_is_not_the_run(directory):
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert not runs.pid_alive(other.pid)
        assert runs.pid_alive(LIVE_PID)
    finally:
        other.kill()
        other.wait()


def test_a_run_whose_process_is_gone_shows_stale(directory):
    gone = state("dead0000", pid=dead_pid(), state=runs.RUNNING)
    alive = state("live0000", state=runs.RUNNING)
    assert runs.shown_state(gone) == runs.STALE
    assert runs.shown_state(alive) == runs.RUNNING
    finished = state("done0000", pid=dead_pid(), state=runs.FINISHED, exit_code=0, finished_at=2000.0)
    assert runs.shown_state(finished) == runs.FINISHED


def test_ps_keeps_finished_runs_a_day_and_at_most_twenty(directory):
    now = 100_000.0
    for i in range(25):  # finished i seconds ago
        runs.write_state(
            state(f"f{i:07d}", state=runs.FINISHED, exit_code=0, finished_at=now - i, started=now - 100), directory
        )
    runs.write_state(state("old00000", state=runs.FINISHED, exit_code=0, finished_at=now - 25 * 3600), directory)
    runs.write_state(state("live0000", state=runs.RUNNING, started=now - 5000), directory)
    listed = {s.id for s in runs.list_runs(directory, now=now)}
    assert listed == {"live0000"} | {f"f{i:07d}" for i in range(20)}
    # the others' files are gone; a recording is never touched
    assert sorted(p.stem for p in directory.glob("*.json")) == sorted(listed)


def test_the_ps_table(directory, tmp_path):
    written = tmp_path / "a.rwrec"
    written.write_bytes(b"RWREC")
    never = str(tmp_path / "never.rwrec")
    rows = [
        state("aaaa0000", state=runs.RUNNING, run_state="ramping", elapsed_s=75, rate_rps=3.25, recording=str(written)),
        state("bbbb0000", state=runs.FINISHED, exit_code=130, elapsed_s=3700, detached=True),
        state("cccc0000", state=runs.RUNNING, pid=dead_pid(), detached=True),
        state("dddd0000", detached=True, recording=never),
        state("eeee0000", state=runs.FINISHED, exit_code=5, recording=never),  # its server never started
    ]
    lines = runs.format_table(rows, directory=directory).splitlines()
    assert [line.split("  ")[0] for line in lines[1:]] == ["aaaa0000", "bbbb0000", "cccc0000", "dddd0000", "eeee0000"]
    assert [" ".join(line.split()[3:]) for line in lines] == [
        "STATE ELAPSED RATE RECORDING",
        f"ramping 1:15 3.2 rps {written}",
        "exit 130 1:01:40 - -",
        "stale 0:00 - -",
        f"starting (detached) 0:00 - {never} (not yet)",
        "exit 5 0:00 - - (none written)",
    ]


def test_register_and_finish_redact_the_target(directory):
    plan = SimpleNamespace(
        scenario=SimpleNamespace(name="chat"), target="http://user:pw@host:8000", recording_path=None
    )
    registered = runs.register("abcd0000", plan, directory=directory)
    assert registered is not None and registered.target == "http://<redacted>@host:8000"
    assert "pw" not in runs.state_path("abcd0000", directory).read_text()
    runs.finished("abcd0000", 130, directory)
    final = runs.read_state(runs.state_path("abcd0000", directory))
    assert final is not None and (final.state, final.exit_code) == (runs.FINISHED, 130)
    assert final.finished_at is not None


@pytest.mark.parametrize(
    ("stored", "socket_exists", "expected"),
    [
        ({"state": runs.RUNNING}, True, ("live", None)),
        ({"state": runs.STARTING}, False, ("wait", None)),
        ({"state": runs.FINISHED, "exit_code": 0, "recording": "REC"}, False, ("replay", "REC")),
    ],
    ids=["running", "starting", "finished"],
)
def test_what_attach_opens(tmp_path, stored, socket_exists, expected):
    rec = tmp_path / "run.rwrec"
    rec.write_bytes(b"")
    if stored.get("recording") == "REC":
        stored = {**stored, "recording": str(rec)}
        expected = ("replay", str(rec))
    s = state("abcd0000", **stored)
    assert what_to_open(s, runs.shown_state(s), socket_exists) == expected


def test_attach_to_a_finished_run_without_recording_or_a_killed_one_is_one_line():
    finished = state("abcd0000", state=runs.FINISHED, exit_code=1)
    with pytest.raises(UserError, match=r"^run abcd0000: finished \(exit 1\) and left no recording to replay$"):
        what_to_open(finished, runs.FINISHED, False)
    killed = state("abcd0000", state=runs.RUNNING, pid=12345, recording="/r.rwrec")
    with pytest.raises(UserError, match=r"^run abcd0000: its process \(pid 12345\) is gone \(killed\?\); what it"):
        what_to_open(killed, runs.STALE, True)


def test_the_detached_command_is_the_typed_one_headless_without_its_api_key():
    argv = ["run", "chat", "--detach", "--api-key", "sk-secret", "--api-key=sk-2", "--duration", "60"]
    out = child_argv(argv, "abcd0000", Path("/r/run.log"), Path("/r/run.rwrec"))
    assert out[:4] == [sys.executable, "-P", "-m", "rampwatch.app.cli"]  # -P: nothing from the current directory
    assert out[4:] == [
        "run", "chat", "--duration", "60",
        "--headless", "--run-id", "abcd0000", "--detached-log", "/r/run.log", "--record", "/r/run.rwrec",
    ]  # fmt: skip
    kept = child_argv(["run", "chat", "--record", "mine.rwrec", "--detach"], "x", Path("l"), Path("/abs/mine.rwrec"))
    assert kept.count("--record") == 1


@pytest.mark.parametrize(
    ("recording", "log"),
    [("/r/x.rwrec", "/r/x.log"), ("/r/x.log", "/r/x.log.log"), (None, "RUNS/abcd0000.log")],
)
def test_where_a_run_that_left_its_terminal_logs(recording, log):
    path = runs.log_path_for("abcd0000", None if recording is None else Path(recording), Path("RUNS"))
    assert str(path) == log


@pytest.mark.parametrize(("exit_code", "expected"), [(0, 0), (130, 130), (5, 5), (None, 1)])
def test_stop_of_a_finished_run_exits_as_the_run_did(tmp_path, monkeypatch, capsys, exit_code, expected):
    import argparse

    from rampwatch.app import stop

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    directory = runs.checked_dir()
    finished = state("fade0000", state=runs.FINISHED, exit_code=exit_code, finished_at=time.time())
    runs.write_state(finished, directory)
    args = argparse.Namespace(run_id="fade", no_wait=False, timeout=None)
    assert stop.main(args) == expected
    assert capsys.readouterr().out == f"run fade0000: already finished (exit {exit_code})\n"
