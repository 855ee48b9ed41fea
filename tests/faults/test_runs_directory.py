"""The runs directory holds only what live and recent runs need: no lock file is left
per run (they piled up, one a run, forever)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from rampwatch.app import runs


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return runs.checked_dir(tmp_path / "runs")


@pytest.fixture
def live_pid() -> Iterator[int]:
    """A live process named like a run's."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "rampwatch"])
    yield proc.pid
    proc.kill()
    proc.wait()


def plan(name: str = "chat") -> SimpleNamespace:
    return SimpleNamespace(scenario=SimpleNamespace(name=name), target="http://h:1", recording_path=None)


def test_a_run_from_register_to_finished_leaves_only_its_state(directory):
    runs.register("aaaa0001", plan(), directory=directory)
    runs.update_state("aaaa0001", directory, state=runs.RUNNING, elapsed_s=3.0)
    runs.finished("aaaa0001", 0, directory)
    assert sorted(p.name for p in directory.iterdir()) == ["aaaa0001.json"]


def test_updating_a_run_that_never_registered_writes_nothing(directory):
    """A run whose plan failed still calls ``finished``: no file for it."""
    assert runs.update_state("bbbb0002", directory, state=runs.FINISHED) is None
    runs.finished("bbbb0002", 2, directory)
    assert list(directory.iterdir()) == []


def test_an_update_waits_for_the_directorys_lock(directory):
    """The owner and the run process both update a run's state: each update holds the
    runs directory's lock (no lock file), so neither overwrites the other's."""
    import fcntl

    runs.register("cccc0003", plan(), directory=directory)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as another process's update holds it
        updater = threading.Thread(target=runs.update_state, args=("cccc0003", directory), kwargs={"elapsed_s": 7.0})
        updater.start()
        updater.join(0.3)
        assert updater.is_alive()  # waiting for the lock
    finally:
        os.close(fd)
    updater.join(10)
    state = runs.read_state(runs.state_path("cccc0003", directory))
    assert state is not None and state.elapsed_s == 7.0
    assert sorted(p.name for p in directory.iterdir()) == ["cccc0003.json"]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["ps", "a run's start"])
def test_lock_files_left_by_earlier_runs_are_cleaned(directory, live_pid, when):
    """``.ID.lock`` files of runs that are not running are removed, by `ps` or when a
    run starts; a running one's is kept."""
    runs.write_state(
        runs.RunState(id="dddd0004", pid=live_pid, scenario="s", target="t", state=runs.RUNNING), directory
    )
    for run_id in ("dddd0004", "eeee0005", "ffff0006"):
        (directory / f".{run_id}.lock").touch()
    runs.write_state(
        runs.RunState(id="eeee0005", pid=live_pid, scenario="s", target="t", state=runs.FINISHED), directory
    )
    if when == "ps":
        runs.list_runs(directory)
    else:
        runs.register("abab0007", plan(), directory=directory)
    assert sorted(p.name for p in directory.glob(".*.lock")) == [".dddd0004.lock"]
