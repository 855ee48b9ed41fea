"""The client's self-check read back from a recording: `report`, `compare`, the replay
(from a checkpoint too) give the run's own figures and warning."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.summary import client_lag_warning
from rampwatch.core.timeline import NullSink
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.record.analysis import summarise
from rampwatch.record.reader import open_recording
from rampwatch.record.replay import feed
from rampwatch.record.writer import RecordingWriter
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve
from tests.loadgen.run.test_loop_health import scenario
from tests.record.test_checkpoints import _straight
from tests.record.test_commands import FIXTURE, rampwatch

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)


class _StallOnce(NullSink):
    def __init__(self) -> None:
        self.done = False

    def on_request(self, record) -> None:
        if not self.done and record.sent_at > 1.0:
            self.done = True
            time.sleep(0.3)  # the loop held: the run's own delay


async def _stalled_run(path: Path):
    writer = RecordingWriter(path, flush_interval_s=0.1, checkpoint_every_s=0.5)
    async with serve(SimConfig(hardware="instant", model="tiny")) as url:
        run = Run(
            scenario(20, 2.0),
            RunOptions(target=url, model="tiny", tick_interval_s=0.25, scrape_interval_s=0.25),
            sinks=[writer, _StallOnce()],
        )
        result = await run.execute()
    writer.close()
    return result


async def test_report_and_compare_read_the_runs_self_check_back(tmp_path):
    path = tmp_path / "stalled.rwrec"
    result = await _stalled_run(path)
    live = result.live_summary.client
    assert live is not None and live.lag_max_ms >= 280.0
    with open_recording(path) as rec:
        read_back = summarise(rec)
    assert read_back.client == live
    warning = client_lag_warning(read_back)
    assert warning is not None

    report = rampwatch("report", str(path))
    assert report.returncode == 0, report.stderr
    assert f"Client loop lag max (ms):                {live.lag_max_ms:<10.2f}" in report.stdout
    assert warning in report.stdout.splitlines()

    compare = rampwatch("compare", str(FIXTURE), str(path), "--resamples", "50")
    assert compare.returncode == 0, compare.stderr
    lines = compare.stdout.splitlines()
    check = lines[lines.index("client self-check") :]
    assert check[3].split()[-2:] == ["n/a", f"{live.lag_max_ms:.1f}"]  # the fixture predates the check
    assert check[-1] == f"B: {warning}"

    as_json = rampwatch("compare", str(FIXTURE), str(path), "--resamples", "50", "--json")
    client = json.loads(as_json.stdout)["client"]
    assert client["a"]["self_check"] is None and client["b"]["self_check"] == read_back.client.to_dict()
    assert client["b"]["send_lateness_ms"] == read_back.send_lateness.to_dict()
    assert json.loads(as_json.stdout)["client_warnings"] == [f"B: {warning}"]


async def test_a_replay_resumed_from_a_checkpoint_has_the_runs_self_check(tmp_path):
    path = tmp_path / "stalled.rwrec"
    await _stalled_run(path)
    with open_recording(path) as rec:
        end = rec.duration_s
        straight = _straight(rec, end)
        # A checkpoint's state taken half way (as the writer stores them), then the rest fed.
        half = SeriesBuilder()
        half.on_start(rec.header)
        feed(half, rec.items_between(float("-inf"), end / 2))
        resumed = SeriesBuilder.from_state(rec.header, *half.export_state())
        feed(resumed, rec.items_between(end / 2, end))
        got = resumed.snapshot(now=end)
    assert straight.summary["client"] is not None and straight.summary["client"]["loop_lag_max_ms"] >= 280.0
    assert got.summary["client"] == straight.summary["client"]
    assert got.series["client_lag_ms"] == straight.series["client_lag_ms"]
