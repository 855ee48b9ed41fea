"""ITLs exported from a recording are never negative and carry no float residue: a
recording keeps times to the microsecond, and its ITLs are given at that precision."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rampwatch.core.timeline import RequestRecord, RunHeader
from rampwatch.record.writer import RecordingWriter

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)


def test_exported_itls_are_whole_microseconds_and_never_negative(tmp_path):
    path = tmp_path / "run.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=None)
    writer.on_start(
        RunHeader(
            rampwatch_version="0", started_at_unix=0.0, target="http://127.0.0.1:1", model="m", scenario_name="random"
        )
    )
    # Chunks 1 µs after the first token (one read), and gaps with sub-µs parts.
    writer.on_request(
        RequestRecord(
            id=0,
            scheduled_at=0.0,
            sent_at=0.0,
            end_at=1.2,
            first_token_at=1.000003,
            chunk_times=[1.000004, 1.0201234567, 1.2],
            prompt_tokens=4,
            completion_tokens=4,
        )
    )
    writer.on_request(
        RequestRecord(
            id=1,
            scheduled_at=0.1,
            sent_at=0.1,
            end_at=1.3,
            first_token_at=0.3333333,
            chunk_times=[0.6666666, 0.9999999, 1.3],
            prompt_tokens=4,
            completion_tokens=4,
        )
    )
    writer.close(finish_t=1.4)
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "export", str(path), "-o", str(out), "--save-detailed"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    itls = [x for per_request in json.loads(out.read_text())["itls"] for x in per_request]
    assert len(itls) == 6
    assert min(itls) >= 0.0
    assert all(x == round(x, 6) for x in itls), itls
    assert itls[0] == 0.0  # 1 µs apart in the run, on the 10 µs chunk grid in the file
