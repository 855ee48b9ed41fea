"""Where TTFT went: phases cut at a request's marks add up to its TTFT; a run's figures go
to the summary, its text and the result JSON, and nowhere for records without marks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.core.figures.bench_result import result_fields
from rampwatch.core.figures.phases import MARK_FIELDS, PHASE_NAMES, PhaseBlock, phase_durations, record_phases
from rampwatch.core.figures.summary import summarise_requests
from rampwatch.core.figures.summary_text import format_summary
from rampwatch.core.timeline import RequestRecord
from rampwatch.record import format as fmt
from rampwatch.record.analysis import request_block

NAN = math.nan


def marked(id: int = 0, sent_at: float = 1.0, first: float | None = 1.5, **marks: float | None) -> RequestRecord:
    return RequestRecord(
        id=id,
        scheduled_at=sent_at,
        sent_at=sent_at,
        end_at=(first or sent_at) + 0.2,
        first_token_at=first,
        chunk_times=[] if first is None else [first + 0.1, first + 0.2],
        completion_tokens=3,
        prompt_tokens=5,
        **marks,
    )


@pytest.mark.parametrize(
    "marks, want",
    [
        # every phase: each ends at its mark
        ((1.01, 1.02, 1.05, 1.06, 1.2), (0.01, 0.01, 0.03, 0.01, 0.14, 0.3)),
        # a reused connection: no slot, DNS or connect; the time before the write is the send's
        ((NAN, NAN, NAN, 1.001, 1.2), (0, 0, 0, 0.001, 0.199, 0.3)),
        # a mark before the one before it (a repeated hop) counts as that one: nothing negative
        ((1.1, NAN, 1.05, 1.12, 1.2), (0.1, 0, 0, 0.02, 0.08, 0.3)),
    ],
)
def test_phase_durations_add_up_to_the_ttft(marks, want):
    got = phase_durations(np.array([1.0]), [np.array([m]) for m in marks], np.array([1.5]))
    assert got[:, 0] == pytest.approx(want)
    assert got[:, 0].sum() == pytest.approx(0.5)


def test_record_phases_of_a_successful_marked_request():
    rec = marked(request_sent_at=1.01, headers_at=1.2)
    assert record_phases(rec) == pytest.approx(
        {"slot": 0, "dns": 0, "connect": 0, "send": 0.01, "headers": 0.19, "first_token": 0.3}
    )
    assert record_phases(marked()) is None  # no marks: an older client's record


def failed(first: float | None = None, **marks: float | None) -> RequestRecord:
    rec = marked(first=first, **marks)
    rec.error_class, rec.error = "http_500", "HTTP 500"
    return rec


@pytest.mark.parametrize(
    "rec, want",
    [
        # failed after its headers (an HTTP 500): every phase up to the headers, no first token
        (failed(connected_at=1.02, request_sent_at=1.03, headers_at=1.2),
         {"slot": 0, "dns": 0, "connect": 0.02, "send": 0.01, "headers": 0.17}),
        # failed after connecting (the write or the wait for the head broke): up to connect
        (failed(slot_at=1.1, connected_at=1.15), {"slot": 0.1, "dns": 0, "connect": 0.05}),
        # a mark before the one before it counts as that one, as for a successful request
        (failed(slot_at=1.1, request_sent_at=1.05), {"slot": 0.1, "dns": 0, "connect": 0, "send": 0}),
        # failed mid-stream, after its first token: all of them, adding up to its TTFT
        (failed(first=1.5, request_sent_at=1.01, headers_at=1.2),
         {"slot": 0, "dns": 0, "connect": 0, "send": 0.01, "headers": 0.19, "first_token": 0.3}),
        # ok but no token at all: the phases it reached
        (marked(first=None, request_sent_at=1.01), {"slot": 0, "dns": 0, "connect": 0, "send": 0.01}),
        # failed before any mark (refused at connect on a fresh name): none
        (failed(), None),
    ],
)  # fmt: skip
def test_a_request_that_ended_before_its_first_token_has_the_phases_it_reached(rec, want):
    got = record_phases(rec)
    assert got == (None if want is None else pytest.approx(want))
    if got is not None and rec.first_token_at is None:  # they end at its last mark
        last = max(m for m in (getattr(rec, f) for f in MARK_FIELDS) if m is not None)
        assert rec.sent_at + sum(got.values()) == pytest.approx(max(last, rec.sent_at))


def test_failed_requests_phases_stay_out_of_the_runs_figures():
    ok = marked(0, request_sent_at=1.01, headers_at=1.2)
    bad = failed(connected_at=1.3, request_sent_at=1.31, headers_at=2.0)
    block = PhaseBlock.from_records([ok, bad])
    assert block is not None and block.durations.shape == (len(PHASE_NAMES), 1)
    assert block.new_connections == 0  # the failed request's connection is not counted either


def _run() -> list[RequestRecord]:
    return [
        marked(0, 0.0, 0.5, connected_at=0.1, request_sent_at=0.11, headers_at=0.2),
        marked(1, 1.0, 1.3, request_sent_at=1.01, headers_at=1.1),
        marked(2, 1.0, 1.9, slot_at=1.3, request_sent_at=1.31, headers_at=1.4),
    ]


def test_a_runs_phases_in_the_summary_its_text_and_the_result_json():
    summary = summarise_requests(None, _run(), [], [])
    figures = summary.ttft_phases
    assert figures is not None
    assert (figures.requests, figures.new_connections, figures.waited_for_slot) == (3, 1, 1)
    # the phases' means add up to the mean TTFT
    means = sum(figures.phases[name]["mean"] for name in PHASE_NAMES)
    assert means == pytest.approx(figures.ttft["mean"]) == pytest.approx(summary.ttft.mean)
    as_dict = summary.to_dict()
    assert as_dict["ttft_phases"]["mean_slot_ms"] == pytest.approx(100.0)
    assert as_dict["ttft_phases"]["p99_first_token_ms"] == pytest.approx(496.0)  # of 200, 300, 500
    text = format_summary(summary)
    assert "Where TTFT went (client side)" in text and "connect (TCP+TLS) mean/p50/p99 (ms):" in text
    assert result_fields(summary, None, 3)["rampwatch_ttft_phases"] == as_dict["ttft_phases"]


def test_records_without_marks_show_nothing():
    plain = [marked(i, float(i)) for i in range(3)]
    summary = summarise_requests(None, plain, [], [])
    assert summary.ttft_phases is None and "ttft_phases" not in summary.to_dict()
    assert "Where TTFT went" not in format_summary(summary)
    assert not any(k.startswith("rampwatch_ttft") for k in result_fields(summary, None, 3))


def test_a_recordings_phases_are_the_records_ones():
    records = _run()
    columns = fmt.decode_request_columns(fmt.encode_requests(records))
    # written only where some record has it: no request here resolved a name
    assert set(MARK_FIELDS) - set(columns.strings) == {"dns_at"}
    from_file = request_block(columns).phases
    in_memory = PhaseBlock.from_records(records)
    assert from_file is not None and in_memory is not None
    assert from_file.durations == pytest.approx(in_memory.durations, abs=2e-6)  # 1 µs quanta
    assert (from_file.new_connections, from_file.waited_for_slot) == (1, 1)
    assert [r.slot_at for r in fmt.decode_requests(fmt.encode_requests(records))] == [None, None, 1.3]


def test_the_live_builders_phases_survive_a_checkpoint():
    from rampwatch.core.figures.summary_builder import RequestBlock, SummaryBuilder

    exact = summarise_requests(None, _run(), [], []).ttft_phases
    live = SummaryBuilder(bounded=True)
    for rec in _run()[:2]:
        live.add(rec)
    arrays: dict[str, np.ndarray] = {}
    restored = SummaryBuilder.restore_state(live.export_state(arrays), arrays)
    restored.add_block(RequestBlock.from_records(_run()[2:]))
    figures = restored.build().ttft_phases
    assert figures is not None and exact is not None
    assert (figures.requests, figures.new_connections, figures.waited_for_slot) == (3, 1, 1)
    for name in PHASE_NAMES:  # running sums: the means are exact; percentiles within a bucket
        assert figures.phases[name]["mean"] == pytest.approx(exact.phases[name]["mean"])
        assert figures.phases[name]["p99"] == pytest.approx(
            exact.phases[name]["p99"], rel=0.02, abs=0.02
        )  # its lowest bucket: 10 µs
    assert "ttft_phases" not in SummaryBuilder(bounded=True).export_state({})  # none without marks
