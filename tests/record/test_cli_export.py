"""`rampwatch export --format csv`'s requests file: issue 28's per-request fields are
columns only when the recording has them (a plain recording's file is pinned as it was),
the mixture's class with them; read back from a recording as written."""

from __future__ import annotations

import argparse
import csv
from dataclasses import replace

import pytest

from rampwatch.core.timeline import RequestRecord
from rampwatch.record.cli_export import REQUEST_COLUMNS, main, optional_columns, write_requests_csv
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from tests.core.figures.reasoning_records import Reasoning, reasoning_record
from tests.synthetic import SyntheticRun, play_synthetic

REASONING = ["first_answer_at", "ttfa_s", "reasoning_tokens", "answer_tokens", "reasoning_from_usage"]


def plain(id: int = 0, **fields) -> RequestRecord:
    record = RequestRecord(
        id=id,
        scheduled_at=0.5,
        sent_at=0.5,
        end_at=2.0,
        first_token_at=1.0,
        chunk_times=[1.1, 1.2],
        completion_tokens=3,
    )
    return replace(record, **fields)


def rows(records, path) -> list[dict[str, str]]:
    write_requests_csv(records, path, optional_columns(records))
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def header(path) -> list[str]:
    with open(path, newline="") as f:
        return next(csv.reader(f))


@pytest.mark.parametrize(
    "records",
    [[plain(0), plain(1)], [plain(0, request_class="chat"), plain(1, request_class="batch")]],
    ids=["plain", "a-mixture-without-issue-28-fields"],
)
def test_a_recording_without_the_new_fields_keeps_its_columns(records, tmp_path):
    assert optional_columns(records) == []
    rows(records, tmp_path / "r.csv")
    assert header(tmp_path / "r.csv") == list(REQUEST_COLUMNS)


@pytest.mark.parametrize(
    "records, added",
    [
        ([plain(0), reasoning_record(1)], REASONING),
        ([plain(0), plain(1, adapter="sql")], ["adapter"]),
        ([plain(0), plain(1, images=2)], ["images"]),
        ([plain(0, request_class="a", adapter="sql"), plain(1, images=1)], ["request_class", "adapter", "images"]),
        (
            [reasoning_record(0, request_class="think"), plain(1, request_class="quick", adapter="x", images=1)],
            ["request_class", *REASONING, "adapter", "images"],
        ),
    ],
    ids=["reasoning", "adapter", "images", "class-with-them", "all"],
)
def test_each_field_a_request_has_is_a_column_after_the_others(records, added, tmp_path):
    rows(records, tmp_path / "r.csv")
    assert header(tmp_path / "r.csv") == [*REQUEST_COLUMNS, *added]


def test_the_reasoning_columns_hold_each_requests_figures(tmp_path):
    thinking = reasoning_record(0, sent_at=0.5, first_answer_at=1.5, reasoning_tokens=3, completion_tokens=6)
    counted = reasoning_record(1, from_usage=False)
    cut_short = reasoning_record(2, first_answer_at=None, chunk_times=(1.1, 1.2), completion_tokens=3)
    answered_at_once = plain(3)  # did not reason: its TTFA is its TTFT, all its tokens the answer
    got = rows([thinking, counted, cut_short, answered_at_once], tmp_path / "r.csv")
    assert [(r["first_answer_at"], r["ttfa_s"], r["reasoning_tokens"], r["answer_tokens"]) for r in got] == [
        ("1.5", "1.0", "3", "3"),
        ("1.5", "1.0", "3", "3"),
        ("", "", "3", "0"),
        ("", "0.5", "", "3"),
    ]
    assert [r["reasoning_from_usage"] for r in got] == ["1", "0", "1", ""]


def test_an_adapter_name_that_would_start_a_formula_is_text(tmp_path):
    got = rows([plain(0, adapter="=HYPERLINK(1)", images=3)], tmp_path / "r.csv")
    assert got[0]["adapter"] == "'=HYPERLINK(1)" and got[0]["images"] == "3"


def test_a_reasoning_recordings_export_has_its_columns_as_recorded(tmp_path):
    path = tmp_path / "reasoning.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=5.0)
    play_synthetic(SyntheticRun(duration_s=6.0, start_rps=2, end_rps=6, seed=4), Reasoning(writer))
    writer.close()
    args = argparse.Namespace(recording=str(path), format="csv", output=str(tmp_path / "out.csv"), force=False)
    assert main(args) == 0
    with open(tmp_path / "out-requests.csv", newline="") as f:
        got = list(csv.DictReader(f))
    with open_recording(path) as recording:
        records = list(recording.iter_requests())
    assert list(got[0])[len(REQUEST_COLUMNS) :] == REASONING
    assert len(got) == len(records) > 10
    for row, r in zip(got, records):
        assert row["reasoning_tokens"] == ("" if r.reasoning_tokens is None else str(r.reasoning_tokens))
        assert row["ttfa_s"] == ("" if r.ttfa is None else repr(round(r.ttfa, 6)))


@pytest.mark.parametrize(
    ("fmt", "names"),
    [
        ("csv", ["run-requests.csv", "run-series.csv"]),
        ("parquet", ["run-requests.parquet", "run-series.parquet"]),
        ("json", ["run.json"]),
        ("html", ["run.html"]),
    ],
)
@pytest.mark.parametrize("slash", ["", "/"])
def test_an_export_to_a_directory_writes_inside_it_named_after_the_recording(fmt, names, slash, tmp_path, capsys):
    from pathlib import Path

    from rampwatch.app.cli import main as cli_main

    recording = tmp_path / "run.rwrec"
    recording.write_bytes((Path(__file__).parents[1] / "data" / "small.rwrec").read_bytes())
    out = tmp_path / "exports"
    out.mkdir()
    assert cli_main(["export", str(recording), "--format", fmt, "-o", f"{out}{slash}"]) == 0
    assert sorted(p.name for p in out.iterdir()) == names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exports", "run.rwrec"]  # nothing beside it
    assert capsys.readouterr().out.split() == [str(out / name) for name in names]


def test_an_export_to_a_missing_directory_is_one_line(tmp_path, capsys):
    from pathlib import Path

    from rampwatch.app.cli import main as cli_main

    recording = Path(__file__).parents[1] / "data" / "small.rwrec"
    missing = tmp_path / "nowhere"
    assert cli_main(["export", str(recording), "--format", "csv", "-o", f"{missing}/"]) == 2
    assert capsys.readouterr().err == (
        f"rampwatch export: error: {missing / 'small-requests.csv'}: output directory {missing} does not exist\n"
    )
