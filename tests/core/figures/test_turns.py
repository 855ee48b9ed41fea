"""Figures by turn index (``core.figures.turns``): rows, the fold of high turns, the hit rate,
the session totals, and the live (bounded) figures against the exact ones."""

from __future__ import annotations

import numpy as np
import pytest

from rampwatch.core.figures import stats
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.turns import (
    NO_HIT_RATE_HINT,
    TURN_ROWS,
    TurnFigures,
    hit_rate_pct,
    row_index,
    row_label,
    session_totals,
    sessions_line,
    turn_table,
    with_active,
)
from rampwatch.core.timeline import RequestRecord
from tests.core.figures.session_records import HISTORY_PER_TURN, session_records, session_stream


def record(turn, *, ttft=0.1, prompt=100, cached=None, error=None, session=0, rid=0):
    first = None if error else 1.0 + ttft
    return RequestRecord(
        id=rid,
        scheduled_at=1.0,
        sent_at=1.0,
        end_at=2.0,
        first_token_at=first,
        chunk_times=[] if first is None else [first + 0.02, first + 0.05],
        prompt_tokens=prompt,
        completion_tokens=3,
        error_class=error,
        session=session,
        turn=turn,
        cached_tokens=cached,
    )


@pytest.mark.parametrize(
    ("turn", "index", "label"),
    [(1, 0, "1"), (2, 1, "2"), (15, 14, "15"), (16, 15, "16+"), (17, 15, "16+"), (400, 15, "16+"), (0, 0, "1")],
)
def test_turns_from_16_on_share_the_last_row(turn, index, label):
    assert TURN_ROWS == 16
    assert row_index(turn) == index
    assert row_label(row_index(turn)) == label


@pytest.mark.parametrize(
    ("cached", "prompt", "reporting", "expected"),
    [(0, 0, 0, None), (50, 200, 0, None), (0, 200, 2, 0.0), (150, 200, 2, 75.0), (100, 0, 1, None)],
)
def test_hit_rate_is_cached_over_prompt_tokens_of_the_reporting_requests(cached, prompt, reporting, expected):
    assert hit_rate_pct(cached, prompt, reporting) == expected


@pytest.mark.parametrize(
    ("turn1", "requests", "errors", "cancelled", "without_error", "mean"),
    [(0, 0, 0, 0, 0, None), (4, 10, 1, 0, 3, 2.5), (3, 3, 1, 1, 1, 1.0), (2, 5, 3, 0, 0, 2.5)],
)
def test_session_totals_from_the_turn_counts(turn1, requests, errors, cancelled, without_error, mean):
    totals = session_totals(turn1, requests, errors, cancelled)
    assert totals.finished is None  # records cannot tell finished sessions from open ones
    assert (totals.sessions, totals.without_error, totals.ended_by_error, totals.cancelled) == (
        turn1,
        without_error,
        errors,
        cancelled,
    )
    assert totals.mean_turns == mean


def test_no_turn_no_table():
    plain = record(None)
    plain.session = None
    assert turn_table([plain]) is None
    figures = TurnFigures()
    figures.add([plain])
    assert not figures and figures.table() is None


def test_each_turn_gets_its_own_ttft_input_tokens_and_hit_rate():
    records = [
        record(1, ttft=0.2, prompt=100, cached=0),
        record(1, ttft=0.4, prompt=300, cached=0),
        record(2, ttft=0.05, prompt=400, cached=300),
        record(2, ttft=0.07, prompt=600, cached=300),
    ]
    table = turn_table(records)
    first, second = table.rows
    assert (first.turn, first.requests, second.turn, second.requests) == ("1", 2, "2", 2)
    assert first.ttft_ms["p50"] == pytest.approx(300.0)
    assert first.ttft_ms["mean"] == pytest.approx(300.0)
    assert second.ttft_ms["p50"] == pytest.approx(60.0)
    assert second.ttft_ms["p99"] == pytest.approx(stats.describe_ms([0.05, 0.07])["p99"])
    assert first.input_tokens_mean == 200 and second.input_tokens_mean == 500
    assert first.hit_rate_pct == 0.0
    assert second.hit_rate_pct == pytest.approx(60.0)  # 600 of 1000
    assert second.cached_tokens_mean == 300
    assert first.itl_ms["p50"] == pytest.approx(25.0)  # gaps of 20 and 30 ms
    assert table.hit_rate_reported


def test_without_cached_tokens_the_hit_rate_is_none_and_the_text_says_how_to_get_it():
    table = turn_table([record(1), record(2)])
    assert [r.hit_rate_pct for r in table.rows] == [None, None]
    assert [r.cached_tokens_mean for r in table.rows] == [None, None]
    assert not table.hit_rate_reported
    text = table.text()
    assert NO_HIT_RATE_HINT in text and "--enable-prompt-tokens-details" in text
    assert text.splitlines()[1].split()[-1] == "—"


def test_only_requests_that_report_cached_tokens_count_in_the_hit_rate():
    table = turn_table([record(2, prompt=1000, cached=None), record(2, prompt=400, cached=100)])
    assert table.rows[1].hit_rate_pct == pytest.approx(25.0)
    assert table.rows[1].input_tokens_mean == 700


def test_a_failed_turn_counts_as_an_error_and_ends_its_session():
    records = session_records(sessions=4, turns=3, fail={1: 2, 3: 1})
    table = turn_table(records)
    assert [r.requests for r in table.rows] == [4, 3, 2]
    assert [r.errors for r in table.rows] == [1, 1, 0]
    totals = table.sessions
    assert (totals.sessions, totals.without_error, totals.ended_by_error, totals.cancelled) == (4, 2, 2, 0)
    assert totals.mean_turns == pytest.approx(9 / 4)
    # failed turns are not in the latencies, the input tokens or the hit rate
    assert table.rows[0].input_tokens_mean == HISTORY_PER_TURN
    assert table.rows[1].hit_rate_pct == pytest.approx(50.0)


def test_a_cancelled_turn_is_neither_an_error_nor_without_error():
    table = turn_table([record(1, session=0), record(1, session=1, error="cancelled")])
    assert (table.rows[0].errors, table.rows[0].cancelled) == (0, 1)
    assert (table.sessions.without_error, table.sessions.cancelled) == (1, 1)


def test_high_turns_fold_into_the_last_row():
    records = [record(t, ttft=0.01 * t, rid=t) for t in range(1, 41)]
    table = turn_table(records)
    assert len(table.rows) == TURN_ROWS
    last = table.rows[-1]
    assert last.turn == "16+" and last.requests == 25
    assert last.ttft_ms["p50"] == pytest.approx(1000 * float(np.median([0.01 * t for t in range(16, 41)])))


def test_turns_seen_out_of_order_leave_an_empty_row_between():
    table = turn_table([record(3)])
    assert [r.requests for r in table.rows] == [0, 0, 1]
    assert table.rows[0].ttft_ms is None and table.rows[0].input_tokens_mean is None
    assert table.sessions.sessions == 0 and table.sessions.mean_turns is None


def test_the_table_text_has_a_row_per_turn_and_the_totals():
    table = turn_table(session_records(sessions=3, turns=3))
    lines = table.text().splitlines()
    assert lines[0].split()[:3] == ["turn", "requests", "errors"]
    assert [line.split()[0] for line in lines[1:4]] == ["1", "2", "3"]
    assert lines[4] == "sessions 3 · ended by an error 0 · no error 3 · mean turns 3.00"


@pytest.mark.parametrize("batch", [1, 5, 1000])
def test_bounded_figures_in_any_batches_are_within_a_histogram_bucket_of_the_exact_ones(batch):
    records = session_records(sessions=20, turns=5)
    exact = turn_table(records)
    figures = TurnFigures()
    for i in range(0, len(records), batch):
        figures.add(records[i : i + batch])
    live = figures.table()
    assert [r.requests for r in live.rows] == [r.requests for r in exact.rows]
    for a, b in zip(live.rows, exact.rows, strict=True):
        assert a.hit_rate_pct == b.hit_rate_pct and a.input_tokens_mean == b.input_tokens_mean
        assert a.ttft_ms["mean"] == pytest.approx(b.ttft_ms["mean"])
        for key in ("p50", "p90", "p99"):
            assert a.ttft_ms[key] == pytest.approx(b.ttft_ms[key], rel=0.011)
    assert live.sessions == exact.sessions


def test_the_series_builder_shows_the_turns_live_and_restores_them_from_a_checkpoint():
    records = session_records(sessions=10, turns=4)
    stream = session_stream(records)
    half = len(stream) // 2
    whole = SeriesBuilder()
    for kind, item in stream:
        getattr(whole, f"on_{kind}")(item)
    first = SeriesBuilder()
    for kind, item in stream[:half]:
        getattr(first, f"on_{kind}")(item)
    resumed = SeriesBuilder.from_state(None, *first.export_state())
    for kind, item in stream[half:]:
        getattr(resumed, f"on_{kind}")(item)
    a, b = whole.snapshot().turns, resumed.snapshot().turns
    assert a is not None and a == b
    assert a.rows[0].ttft_ms["p50"] > 3 * a.rows[1].ttft_ms["p50"]  # turn 2 hits the cache
    assert [r.hit_rate_pct for r in a.rows] == pytest.approx([0.0, 50.0, 200 / 3, 75.0])


def test_runs_without_sessions_have_no_turns_and_old_checkpoints_restore_none():
    builder = SeriesBuilder()
    plain = record(None)
    builder.on_request(plain)
    assert builder.snapshot().turns is None
    meta, arrays = builder.export_state()
    assert "turns" not in meta
    assert SeriesBuilder.from_state(None, meta, arrays).snapshot().turns is None


def test_a_row_with_only_failures_has_no_latencies():
    table = turn_table([record(1, error="timeout")])
    row = table.rows[0]
    assert row.ttft_ms is None and row.itl_ms is None and row.input_tokens_mean is None
    assert row.hit_rate_pct is None and row.errors == 1


def test_queued_records_are_bounded_and_folded_when_read():
    figures = TurnFigures()
    records = session_records(sessions=300, turns=4)
    for r in records:
        figures.add([r])
        assert len(figures._pending) < TurnFigures.FOLD_AT_PENDING
    assert figures.table() == turn_table(records, stats.RunningValues, stats.RunningValues)
    assert figures._pending == []


def test_the_runs_own_count_of_finished_sessions_comes_from_its_ticks():
    """A session workload's ticks count its sessions; ticks without any (0: other runs,
    older recordings) say nothing of them."""
    from rampwatch.core.timeline import Tick

    builder = SeriesBuilder()
    for kind, item in session_stream(session_records(sessions=3, turns=2)):
        getattr(builder, f"on_{kind}")(item)
    assert builder.snapshot().turns.sessions.finished is None
    builder.on_tick(Tick(t=9.0, target_rps=1.0, state="ramping", sessions_started_total=3, sessions_finished_total=2))
    totals = builder.snapshot().turns.sessions
    assert totals.finished == 2 and totals.without_error == 3
    restored = SeriesBuilder.from_state(None, *builder.export_state())
    assert restored.snapshot().turns.sessions.finished == 2
    assert "sessions 3 · finished 2 · ended by an error 0 · no error 3" in builder.snapshot().turns.text()


@pytest.mark.parametrize(
    ("turn1", "errors", "cancelled", "finished", "active", "line"),
    [
        # Mid-run: 19 active, 26 finished, but only 33 first turns have ended.
        (33, 0, 0, 26, 19, "sessions 45 · finished 26 · ended by an error 0 · no error 45 · active 19"),
        (33, 2, 1, 26, 19, "sessions 45 · finished 26 · ended by an error 2 · no error 42 · cancelled 1 · active 19"),
        # At the end (none active) the run's count and the turn table's are the same.
        (38, 1, 0, 38, 0, "sessions 38 · finished 38 · ended by an error 1 · no error 37 · active 0"),
        # Without the run's count (a recording whose ticks carry none) the table's stays.
        (33, 0, 0, None, 19, "sessions 33 · ended by an error 0 · no error 33 · active 19"),
    ],
)
def test_the_live_line_counts_the_sessions_whose_first_turn_is_in_flight(
    turn1, errors, cancelled, finished, active, line
):
    totals = session_totals(turn1, requests=2 * turn1, errors=errors, cancelled=cancelled, finished=finished)
    assert sessions_line(totals, active).startswith(line + " · mean turns 2.00")
    live = with_active(totals, active)
    assert live.sessions == live.ended_by_error + live.without_error + live.cancelled
    if finished is not None:
        assert live.sessions == max(turn1, finished + active)
