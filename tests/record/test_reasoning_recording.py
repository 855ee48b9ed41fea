"""A reasoning model's recording: its reasoning fields read back give the figures the
records in memory give (TTFA, each phase's ITL, the reasoning share)."""

from __future__ import annotations

import pytest

from rampwatch.core.figures.summary import summarise_requests
from rampwatch.record.analysis import summarise
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter
from tests.core.figures.reasoning_records import Reasoning
from tests.record.helpers import CaptureSink
from tests.synthetic import SyntheticRun, play_synthetic


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("reasoning") / "reasoning.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=5.0)
    capture = CaptureSink()
    play_synthetic(SyntheticRun(duration_s=20.0, start_rps=2, end_rps=10, seed=4), Reasoning(writer, capture))
    writer.close()
    return path, capture


def test_the_recordings_reasoning_figures_are_the_in_memory_ones(recorded):
    path, capture = recorded
    with open_recording(path) as recording:
        from_file = summarise(recording).reasoning
    in_memory = summarise_requests(capture.header, capture.requests, [], []).reasoning
    assert from_file is not None and in_memory is not None
    assert from_file.reasoning_requests == in_memory.reasoning_requests > 50
    assert from_file.no_answer_requests == in_memory.no_answer_requests > 0
    assert from_file.reasoning_tokens == in_memory.reasoning_tokens
    assert from_file.reasoning_share == pytest.approx(in_memory.reasoning_share)
    assert 0.5 < from_file.reasoning_share < 0.8
    assert from_file.tokens_source == "usage"
    assert from_file.ttfa.mean == pytest.approx(in_memory.ttfa.mean, abs=0.01)
    assert from_file.ttfa.percentiles["p99"] == pytest.approx(in_memory.ttfa.percentiles["p99"], abs=0.01)
    # chunk times are kept to 10 µs: the ITLs within that
    for phase in ("reasoning_itl", "answer_itl"):
        got, want = getattr(from_file, phase), getattr(in_memory, phase)
        assert got.mean == pytest.approx(want.mean, abs=0.02), phase
        assert got.percentiles["p99"] == pytest.approx(want.percentiles["p99"], abs=0.02), phase


def _recording(path, share: float | None):
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=5.0)
    sink = writer if share is None else Reasoning(writer, share=share, cut_short=0.0)
    play_synthetic(SyntheticRun(duration_s=20.0, start_rps=2, end_rps=10, seed=4), sink)
    writer.close()
    return path


def _rows(a_path, b_path):
    from rampwatch.record.analysis import comparison_samples
    from rampwatch.record.cli_compare import compare_rows

    with open_recording(a_path) as a, open_recording(b_path) as b:
        rows = compare_rows(
            summarise(a).to_dict(), summarise(b).to_dict(), comparison_samples(a), comparison_samples(b), resamples=200
        )
    return {r["key"]: r for r in rows}


def test_compare_tells_a_later_first_answer_from_noise(tmp_path):
    rows = _rows(_recording(tmp_path / "a.rwrec", 0.3), _recording(tmp_path / "b.rwrec", 0.7))
    # the same requests, thinking through 70 % of their chunks instead of 30 %: B answers later
    for key in ("mean_ttfa_ms", "median_ttfa_ms", "p99_ttfa_ms"):
        assert rows[key]["verdict"] == "worse" and rows[key]["better"] == "A", key
    assert rows["mean_ttft_ms"]["verdict"] == "within noise"  # the first token came as soon
    assert rows["reasoning_share_pct"]["b"] > rows["reasoning_share_pct"]["a"] + 30
    assert rows["reasoning_share_pct"]["verdict"] == "-"
    # how much a model thinks is the workload's trait: neither more nor less is "better"
    assert rows["reasoning_share_pct"]["higher_is_better"] is None
    from rampwatch.record.cli_compare import format_comparison

    text = format_comparison(list(rows.values()), "a", "b")
    share = next(line for line in text.splitlines() if line.startswith("Reasoning share"))
    assert "better" not in share
    assert next(line for line in text.splitlines() if line.startswith("Mean TTFA")).endswith("(↓ better)")


def test_compare_of_a_reasoning_run_with_a_plain_one_tests_no_ttfa(tmp_path):
    rows = _rows(_recording(tmp_path / "plain.rwrec", None), _recording(tmp_path / "b.rwrec", 0.5))
    assert rows["mean_ttfa_ms"]["a"] is None and rows["mean_ttfa_ms"]["verdict"] == "-"
    plain = _rows(tmp_path / "plain.rwrec", tmp_path / "plain.rwrec")
    assert not [key for key in plain if "ttfa" in key or "reasoning" in key]


def test_the_series_csv_has_the_reasoning_columns_only_in_a_reasoning_run(recorded, tmp_path):
    import csv

    from rampwatch.core.figures.series_reasoning import REASONING_SERIES
    from rampwatch.record.analysis import final_snapshot
    from rampwatch.record.cli_export import write_series_csv

    path, _ = recorded
    with open_recording(path) as recording:
        write_series_csv(final_snapshot(recording), tmp_path / "s.csv")
    header, *rows = list(csv.reader((tmp_path / "s.csv").open()))
    assert header[-len(REASONING_SERIES) :] == list(REASONING_SERIES)
    assert any(row[header.index("ttfa_p50")] for row in rows)
    plain = _recording(tmp_path / "plain.rwrec", None)
    with open_recording(plain) as recording:
        write_series_csv(final_snapshot(recording), tmp_path / "p.csv")
    assert not [n for n in next(csv.reader((tmp_path / "p.csv").open())) if "ttfa" in n or "reasoning" in n]


@pytest.mark.parametrize(
    ("field", "value"),
    [("reasoning_tokens", "many"), ("reasoning_tokens", True), ("reasoning_tokens", 2.5), ("reasoning_from_usage", 1)],
)
def test_a_reasoning_column_of_the_wrong_type_makes_its_block_undecodable(field, value):
    """A crafted block (its checksum holds) with text where a count belongs: a ValueError,
    which the reader turns into a lost block with a warning (``reader._DECODE_ERRORS``),
    not a traceback in the figures; the writer refuses to write one (it decodes its blocks)."""
    from rampwatch.record import format as fmt
    from tests.core.figures.reasoning_records import reasoning_record

    good = fmt.encode_requests([reasoning_record(0)])
    assert fmt.decode_request_columns(good).strings["reasoning_tokens"] == [3]
    bad = reasoning_record(0)
    setattr(bad, field, value)
    with pytest.raises(ValueError, match=f"its {field} column is not 1 values of type"):
        fmt.decode_request_columns(fmt.encode_requests([bad]))
