"""The one result-JSON writer: a recording's requests streamed frame by frame, or the
same requests held in memory, give the same result (the lists' parts differ in where
they join: ", " between a recording's frames)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from rampwatch.core.figures.summary import to_bench_result
from rampwatch.record.analysis import class_figures, recording_turns, summarise
from rampwatch.record.reader import open_recording
from rampwatch.record.result_json import write_bench_result, write_records_result

PINNED = Path(__file__).resolve().parents[1] / "data" / "pinned"


@pytest.mark.parametrize("detailed", [False, True], ids=["plain", "detailed"])
@pytest.mark.parametrize("name", ["mixed-sim", "turns-sim"])
def test_requests_in_memory_write_the_recordings_result(name, detailed, tmp_path):
    rec = open_recording(PINNED / f"{name}.rwrec")
    summary = summarise(rec)
    write_bench_result(rec, summary, tmp_path / "streamed.json", detailed)
    in_memory = io.StringIO()
    records = rec.requests
    write_records_result(
        rec.header, records, summary, in_memory, detailed, classes=class_figures(rec), turns=recording_turns(rec)
    )
    streamed = (tmp_path / "streamed.json").read_text()
    got = json.loads(streamed)
    assert json.loads(in_memory.getvalue()) == got
    assert list(json.loads(in_memory.getvalue())) == list(got)  # the same key order
    # and both hold the schema's values (``to_bench_result``) for the run's own fields
    want = json.loads(json.dumps(to_bench_result(summary, rec.header, records, detailed=detailed), default=str))
    assert {key: got[key] for key in want} == want
