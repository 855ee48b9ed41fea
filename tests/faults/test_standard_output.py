"""Standard output as the user pipes it: `export -o -` writes the export there (not a file
named `-`), and a reader that goes away early (`| head -1`) ends any command quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.app.cli import CLOSED_STDOUT_EXIT

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "small.rwrec"


def rampwatch(*args: str, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rampwatch.app.cli", *args], cwd=cwd, text=True, timeout=120, **kwargs)


@pytest.mark.parametrize("fmt", ["json", "html"])
def test_export_to_dash_writes_standard_output_and_no_file(tmp_path, fmt):
    to_file = rampwatch("export", str(FIXTURE), "--format", fmt, "-o", str(tmp_path / f"x.{fmt}"), capture_output=True)
    assert to_file.returncode == 0, to_file.stderr
    work = tmp_path / "work"
    work.mkdir()
    proc = rampwatch("export", str(FIXTURE), "--format", fmt, "-o", "-", cwd=work, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert list(work.iterdir()) == []  # no file named "-"
    assert proc.stdout == (tmp_path / f"x.{fmt}").read_text()  # the export alone, no path line after it
    if fmt == "json":
        assert json.loads(proc.stdout)["completed"] > 0


def test_a_csv_export_to_dash_is_one_line(tmp_path):
    proc = rampwatch("export", str(FIXTURE), "--format", "csv", "-o", "-", cwd=tmp_path, capture_output=True)
    assert proc.returncode == 2
    assert proc.stderr == (
        "rampwatch export: error: -o -: a csv export is two files (requests and series); "
        "give -o a path whose stem names them\n"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ("report", str(FIXTURE)),
        ("report", str(FIXTURE), "--json"),
        ("export", str(FIXTURE), "--format", "html", "-o", "-"),
        ("compare", str(FIXTURE), str(FIXTURE)),
    ],
)
def test_a_reader_that_has_gone_ends_the_command_quietly(args):
    """What `| head -1` does to a long output: the pipe's reader has gone when the
    command writes. Its read end is closed before the command starts, so the first write
    meets the broken pipe every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = rampwatch(*args, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert proc.stderr == ""  # no traceback, no "Exception ignored" from the flush at exit
    assert proc.returncode == CLOSED_STDOUT_EXIT


def test_a_run_whose_reader_leaves_goes_on_and_keeps_its_files_and_exit_code(tmp_path):
    """`rampwatch run --headless | head`: once the reader has gone, the run goes on
    silently; its recording, result JSON and own exit code are kept."""
    recording = tmp_path / "r.rwrec"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", "--record", str(recording)]
        + ["--duration", "3", "--start-rps", "4", "--end-rps", "4", "--set", "workload.output_tokens=8"]
        + ["--progress-interval", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    for line in proc.stdout:
        if line.startswith("["):  # the first progress line: the next meets a closed pipe
            break
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert err == ""
    assert json.loads((tmp_path / "r.json").read_text())["completed"] > 0
    assert recording.stat().st_size > 0


def test_an_export_through_a_link_replaces_the_file_it_names_and_keeps_the_link(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    proc = rampwatch("export", str(FIXTURE), "-o", str(link), "--force", capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["completed"] > 0


def test_an_export_to_a_pipe_is_written_through_it_never_replaced_by_a_file(tmp_path):
    """`-o /dev/stdout` (as root, `--force` once replaced the device with a file, for every
    process of the machine): a pipe or a device named as the output is written as it is,
    and needs no --force."""
    import stat
    import threading

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    for force in ((), ("--force",)):
        proc = rampwatch("export", str(FIXTURE), "-o", str(fifo), *force, capture_output=True)
        assert proc.returncode == 0, proc.stderr
        assert stat.S_ISFIFO(fifo.lstat().st_mode)
        if not force:
            reader.join(timeout=60)
            reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
            reader.start()
    reader.join(timeout=60)
    assert len(received) == 2 and all(json.loads(data)["completed"] > 0 for data in received)
