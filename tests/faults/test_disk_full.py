"""The disk fills up while a run is recorded: the run keeps measuring, the recording says
once when and why it stopped, what it holds so far stays readable, and the summary and
result JSON are still written."""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest

from rampwatch.app.session import serving_sim
from rampwatch.core.timeline import RequestRecord, RunHeader
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from rampwatch.sim.config import SimConfig


class FillingDisk:
    """A file on a disk with ``room`` bytes left: writes past it (and the flush at close)
    fail with ENOSPC, as a full filesystem does."""

    def __init__(self, real, room: int) -> None:
        self.real = real
        self.room = room
        self.pending = b""

    def write(self, data: bytes) -> int:
        fits = max(0, self.room)
        self.real.write(data[:fits])
        self.room -= len(data)
        if self.room < 0:
            self.pending = data[fits:]
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(data)

    def flush(self) -> None:
        self.real.flush()

    def close(self) -> None:
        self.real.close()
        if self.pending:
            raise OSError(errno.ENOSPC, "No space left on device")


def record(i: int, t: float) -> RequestRecord:
    return RequestRecord(
        id=i,
        scheduled_at=t - 0.5,
        sent_at=t - 0.5,
        end_at=t,
        first_token_at=t - 0.4,
        chunk_times=[t - 0.4, t - 0.2, t],
        prompt_tokens=16,
        completion_tokens=3,
    )


def test_the_recording_stops_once_with_when_and_why_and_keeps_what_it_holds(tmp_path, caplog):
    path = tmp_path / "run.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=None)
    writer.on_start(
        RunHeader(
            rampwatch_version="0", started_at_unix=0.0, target="http://127.0.0.1:1", model="m", scenario_name="random"
        )
    )
    for i in range(20):
        writer.on_request(record(i, 1.0 + i * 0.1))
    writer.flush()
    held = path.stat().st_size
    writer._file = FillingDisk(writer._file, room=10)  # the disk is now full
    for i in range(20, 40):
        writer.on_request(record(i, 5.0 + i * 0.1))
    writer.flush()  # fails: must not raise into the run
    writer.on_request(record(40, 12.0))  # the run goes on handing records over
    writer.close(finish_t=12.0)  # the buffered bytes cannot be flushed either: no raise
    assert str(writer.error) == "stopped at 2.9 s of the run: No space left on device"
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"recording {path} stopped at 2.9 s of the run: No space left on device"
    ]
    assert path.stat().st_size == held + 10  # the 10 bytes that fitted, a cut frame
    recording = open_recording(path)
    assert [r.id for r in recording.requests] == list(range(20))
    assert any("no end marker" in w for w in recording.warnings)


@pytest.fixture(scope="module")
def sim_url():
    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        yield sim.url


@pytest.mark.slow
def test_a_full_disk_from_the_start_still_gives_the_summary_and_result(sim_url, tmp_path):
    """/dev/full: every write fails with ENOSPC."""
    result_json = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            "random",
            "--headless",
            "--target",
            sim_url,
            "--duration",
            "2",
            "--start-rps",
            "5",
            "--end-rps",
            "5",
            "--set",
            "workload.output_tokens=8",
            "--record",
            "/dev/full",
            "--result-json",
            str(result_json),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "Successful requests:" in proc.stdout
    # nothing to read the exact figures back from: the live ones, said so
    assert "(live figures: percentiles within 1 %, not exact)" in proc.stdout
    result = json.loads(result_json.read_text())
    assert result["completed"] > 0 and result["failed"] == 0
    failure = [line for line in proc.stderr.splitlines() if line.startswith("rampwatch run:")]
    assert failure == [
        "rampwatch run: recording /dev/full failed: stopped at 0.0 s of the run: No space left on device"
    ]


@pytest.mark.slow
def test_a_result_json_that_cannot_be_written_at_the_end_is_one_line(sim_url, tmp_path):
    """/dev/full passes the check before the run (it is writable) and fails the write after it."""
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", "--target", sim_url,
         "--duration", "2", "--start-rps", "5", "--end-rps", "5", "--set", "workload.output_tokens=8",
         "--no-record", "--result-json", "/dev/full"],
        capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "Successful requests:" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "rampwatch run: cannot write /dev/full: No space left on device"
