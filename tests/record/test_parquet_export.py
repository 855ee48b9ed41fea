"""`rampwatch export --format parquet`: the CSV export's two tables, same columns and
values, read back from the files; written a row group at a time; without pyarrow, one
line naming the extra."""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rampwatch.app.cli import main as cli_main
from rampwatch.core.timeline import RequestRecord
from rampwatch.record.cli_export import REQUEST_COLUMNS, main, request_cells, request_header
from rampwatch.record.parquet_export import MISSING, write_requests
from rampwatch.record.writer import RecordingWriter
from tests.core.figures.reasoning_records import Reasoning
from tests.synthetic import SyntheticRun, play_synthetic

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDINGS = [
    DATA / "small.rwrec",
    DATA / "pinned" / "mixed-sim.rwrec",
    DATA / "pinned" / "turns-sim.rwrec",
    Path(__file__).resolve().parent / "data" / "v1-tiny.rwrec",
]


class Issue28Fields:
    """Passes a synthetic run on with issue 28's per-request fields: reasoning (through
    ``Reasoning``), an adapter (one of them a formula's text), images, a failure."""

    def __init__(self, *sinks) -> None:
        self.sinks = sinks

    def on_request(self, record: RequestRecord) -> None:
        extra: dict = {"adapter": ("sql", "=HYPERLINK(1)", None)[record.id % 3]}
        if record.id % 4 == 1:
            extra["images"] = 2
        if record.id % 7 == 3:
            extra.update(error_class="http_500", error="-boom", status=500, finish_reason=None)
        record = replace(record, **extra)
        for s in self.sinks:
            s.on_request(record)

    def __getattr__(self, name):
        def each(item):
            for s in self.sinks:
                getattr(s, name)(item)

        return each


def issue28_recording(path: Path) -> Path:
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=5.0)
    play_synthetic(SyntheticRun(duration_s=6.0, start_rps=2, end_rps=6, seed=4), Reasoning(Issue28Fields(writer)))
    writer.close()
    return path


def export(recording: Path, fmt: str, out: Path) -> None:
    args = argparse.Namespace(recording=str(recording), format=fmt, output=str(out), force=False, save_detailed=False)
    assert main(args) == 0


def as_csv_cell(value) -> str:
    """A Parquet value as the CSV writes it (a float: the repr of the rounded value)."""
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def read_parquet(path: Path) -> tuple[list[str], list[list[str]]]:
    table = pq.read_table(path)
    return table.column_names, [[as_csv_cell(v) for v in row.values()] for row in table.to_pylist()]


def assert_round_trip(recording: Path, tmp_path: Path) -> list[str]:
    export(recording, "csv", tmp_path / "out.csv")
    export(recording, "parquet", tmp_path / "out.parquet")
    for table in ("requests", "series"):
        csv_header, csv_rows = read_csv(tmp_path / f"out-{table}.csv")
        header, rows = read_parquet(tmp_path / f"out-{table}.parquet")
        assert header == csv_header
        assert len(rows) == len(csv_rows) > 0
        assert rows == csv_rows
    return header_of(tmp_path / "out-requests.parquet")


def header_of(path: Path) -> list[str]:
    return pq.read_schema(path).names


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: p.name)
def test_the_parquet_files_hold_the_csv_exports_values(recording, tmp_path):
    assert assert_round_trip(recording, tmp_path) == list(REQUEST_COLUMNS)


def test_issue_28s_columns_round_trip_too(tmp_path):
    recording = issue28_recording(tmp_path / "issue28.rwrec")
    added = ["first_answer_at", "ttfa_s", "reasoning_tokens", "answer_tokens", "reasoning_from_usage"]
    assert assert_round_trip(recording, tmp_path) == [*REQUEST_COLUMNS, *added, "adapter", "images"]
    table = pq.read_table(tmp_path / "out-requests.parquet")
    assert table.schema.field("ttfa_s").type == pa.float64()
    assert table.schema.field("images").type == pa.int64()
    assert table.schema.field("reasoning_from_usage").type == pa.int8()
    assert table.schema.field("adapter").type == pa.string()
    adapters = set(table.column("adapter").to_pylist())
    assert adapters == {"sql", "'=HYPERLINK(1)", None}  # the CSV's cell, its empty cell a null
    assert None in table.column("images").to_pylist() and 2 in table.column("images").to_pylist()
    assert "'-boom" in table.column("error").to_pylist()


def plain(id: int) -> RequestRecord:
    return RequestRecord(id=id, scheduled_at=0.5, sent_at=0.5, end_at=2.0, first_token_at=1.0, completion_tokens=3)


@pytest.mark.parametrize("n, per_group, groups", [(10, 4, 3), (8, 4, 2), (3, 4, 1), (0, 4, 1)])
def test_requests_are_written_a_row_group_at_a_time(n, per_group, groups, tmp_path):
    def records():
        for i in range(n):
            yield plain(i)

    path = tmp_path / "r.parquet"
    write_requests(path, request_header([]), (request_cells(r, []) for r in records()), rows_per_group=per_group)
    meta = pq.ParquetFile(path).metadata
    assert (meta.num_rows, meta.num_row_groups) == (n, groups)
    assert [meta.row_group(g).num_rows for g in range(groups)] == [
        min(per_group, n - g * per_group) for g in range(groups)
    ]
    assert pq.read_schema(path).names == list(REQUEST_COLUMNS)
    assert pq.read_table(path).column("id").to_pylist() == list(range(n))


def test_without_pyarrow_the_export_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    out = tmp_path / "out.parquet"
    assert cli_main(["export", str(DATA / "small.rwrec"), "--format", "parquet", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"rampwatch export: error: {MISSING}\n"
    assert "pip install 'rampwatch[parquet]'" in err
    assert list(tmp_path.iterdir()) == []


def test_a_parquet_export_to_standard_output_is_refused(tmp_path, capsys):
    assert cli_main(["export", str(DATA / "small.rwrec"), "--format", "parquet", "-o", "-"]) == 2
    assert capsys.readouterr().err == (
        "rampwatch export: error: -o -: a parquet export is two files (requests and series); "
        "give -o a path whose stem names them\n"
    )


def test_a_parquet_export_checks_both_of_its_files_before_writing_either(tmp_path, capsys):
    series = tmp_path / "out-series.parquet"
    series.write_bytes(b"kept")
    args = ["export", str(DATA / "small.rwrec"), "--format", "parquet", "-o", str(tmp_path / "out.parquet")]
    assert cli_main(args) == 2
    assert capsys.readouterr().err == f"rampwatch export: error: {series}: exists; pass --force to overwrite it\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out-series.parquet"] and series.read_bytes() == b"kept"
    assert cli_main([*args, "--force"]) == 0
    assert pq.read_table(series).num_rows > 0


class PhaseMarks(Issue28Fields):
    """Passes a synthetic run on with the client-side phase marks of issue 29 (where the
    TTFT went): a new connection every third request, the others on a kept one."""

    def on_request(self, record: RequestRecord) -> None:
        sent = record.sent_at
        if record.id % 7 == 5:  # an HTTP 500 at its headers: the phases it reached, none after
            record = replace(
                record, first_token_at=None, chunk_times=[], completion_tokens=0, error_class="http_500",
                error="HTTP 500", end_at=sent + 0.003, request_sent_at=sent + 0.001, headers_at=sent + 0.002,
            )  # fmt: skip
        elif record.first_token_at is not None:
            marks = {"request_sent_at": sent + 0.001, "headers_at": sent + 0.002}
            if record.id % 3 == 0:
                marks["connected_at"] = sent + 0.0005
            record = replace(record, **marks)

        for s in self.sinks:
            s.on_request(record)


def test_the_ttft_phase_columns_round_trip_as_numbers(tmp_path):
    from rampwatch.core.figures import phases

    path = tmp_path / "phases.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=5.0)
    play_synthetic(SyntheticRun(duration_s=6.0, start_rps=2, end_rps=6, seed=4), PhaseMarks(writer))
    writer.close()
    header = assert_round_trip(path, tmp_path)
    columns = [*phases.MARK_FIELDS, *(f"{name}_phase_s" for name in phases.PHASE_NAMES)]
    assert set(columns) <= set(header)
    schema = pq.read_schema(tmp_path / "out-requests.parquet")
    assert all(schema.field(name).type == pa.float64() for name in columns)
    rows = pq.read_table(tmp_path / "out-requests.parquet").to_pylist()
    partial = [r for r in rows if r["first_token_at"] is None]
    assert partial and all(r["headers_phase_s"] == pytest.approx(0.001, abs=2e-6) for r in partial)
    assert all(r["first_token_phase_s"] is None for r in partial)
