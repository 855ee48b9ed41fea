import math

import numpy as np
import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.steps import HELD_SPEED_KINDS, StepTracker, step_cells, step_json, step_key, step_table_text
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.loadgen.workload.schedule_spec import TRACE_KIND
from rampwatch.record.checkpoint import CheckpointTooOld, read_checkpoint


def header(kind: str, planned: float, **schedule) -> RunHeader:
    return RunHeader(
        rampwatch_version="0",
        started_at_unix=0,
        target="t",
        model="m",
        scenario_name="s",
        scenario={"schedule": {"kind": kind, **schedule}},
        planned_duration_s=planned,
    )


def ok(i, sent, ttft, end, tokens=10, chunks=None):
    return RequestRecord(
        id=i,
        scheduled_at=sent,
        sent_at=sent,
        end_at=end,
        first_token_at=sent + ttft,
        chunk_times=chunks if chunks is not None else [end],
        completion_tokens=tokens,
    )


def failed(i, sent, end):
    return RequestRecord(id=i, scheduled_at=sent, sent_at=sent, end_at=end, error_class="http_500")


@pytest.mark.parametrize(
    ("state", "target", "ramp_t", "kind", "planned", "held", "key"),
    [
        ("ramping", 2.0, 5.0, "steps", 60.0, "hold", ("step", 2.0)),
        ("ramping", 2.0, 5.0, "constant", 60.0, "hold", ("step", 2.0)),
        ("ramping", 2.0, 5.0, "linear", 100.0, "hold", ("ramp", 0)),
        ("ramping", 9.0, 55.0, "linear", 100.0, "hold", ("ramp", 5)),
        ("ramping", 20.0, 130.0, "exponential", 100.0, "hold", ("ramp", 9)),  # past the plan: last tenth
        ("ramping", 2.0, 5.0, "linear", None, "hold", ("step", 2.0)),  # no plan: split by rate
        ("ramping", 2.0, 15.0, "ramp", 100.0, "hold", ("ramp", 1)),  # an older recording's kind
        ("ramping", 2.0, 15.0, None, 100.0, "hold", ("ramp", 1)),
        ("holding", 4.0, 50.0, "linear", 100.0, "hold", ("hold", 4.0)),
        ("holding", 6.0, 50.0, "linear", 100.0, "rate", ("rate", 6.0)),
        ("stopping", 6.0, 50.0, "steps", 100.0, "hold", ("drain",)),
        ("done", 0.0, 50.0, "steps", 100.0, "hold", ("drain",)),
    ],
)
def test_step_key(state, target, ramp_t, kind, planned, held, key):
    assert step_key(state, target, ramp_t, kind, planned, held) == key


def feed_steps(b: SeriesBuilder) -> None:
    """A steps schedule 2 rps for 10 s then 4 rps for 10 s; the 4 rps step is slower."""
    b.on_start(header("steps", 20.0))
    n = 0
    for s in range(20):
        rate = 2.0 if s < 10 else 4.0
        b.on_tick(Tick(t=s + 0.5, target_rps=rate, state="ramping"))
        b.on_scrape(ServerSample(t=s + 0.6, url="u", ok=True, running=1, waiting=float(s), kv_usage=s / 100))
        for k in range(int(rate)):
            sent = s + 0.5 + k * 0.1
            if s < 10:
                b.on_request(ok(n, sent, 0.05, sent + 0.3))
            else:
                b.on_request(ok(n, sent, 0.2, sent + 0.4))
            n += 1


def test_steps_rows_per_target_rate():
    b = SeriesBuilder()
    feed_steps(b)
    b.on_request(failed(999, 3.0, 25.0))  # sent in the first step, ends much later: still its row
    rows = b.snapshot().steps
    assert [r.kind for r in rows] == ["step", "step"]
    first, second = rows
    assert (first.start_s, first.end_s, second.start_s) == (0.0, 10.5, 10.5)
    assert (first.target_lo_rps, first.target_hi_rps, second.target_lo_rps) == (2.0, 2.0, 4.0)
    assert first.sent == 21 and first.errors == 1 and second.errors == 0
    assert first.ttft_p50 == pytest.approx(0.05, rel=0.02) and second.ttft_p99 == pytest.approx(0.2, rel=0.02)
    # achieved counts requests that ended OK in the row over its length
    assert first.completed == 20 and first.achieved_rps == pytest.approx(20 / 10.5)
    assert second.completed == 40
    assert first.output_tps == pytest.approx(200 / 10.5)
    assert first.kv_max_pct == pytest.approx(9.0) and first.kv_mean_pct == pytest.approx(4.5)
    assert first.waiting_max == 9.0 and second.waiting_max == 19.0


def test_ramp_rows_per_tenth_of_ramp_time_excluding_holds():
    b = SeriesBuilder()
    b.on_start(header("linear", 100.0, start_rps=1, end_rps=11))
    for s in range(30):
        b.on_tick(Tick(t=float(s), target_rps=1 + s / 10, state="ramping"))
    b.on_event(Event(t=30.0, kind="hold", data={"before_rps": 4.0, "after_rps": 4.0}))
    for s in range(30, 40):
        b.on_tick(Tick(t=float(s), target_rps=4.0, state="holding"))
    b.on_event(Event(t=40.0, kind="set_rate", data={"before_rps": 4.0, "after_rps": 5.0}))
    for s in range(40, 45):
        b.on_tick(Tick(t=float(s), target_rps=5.0, state="holding"))
    b.on_event(Event(t=45.0, kind="resume", data={"before_rps": 5.0, "after_rps": 4.0}))
    for s in range(45, 56):  # ramp time 30 … 40 (15 s held)
        b.on_tick(Tick(t=float(s), target_rps=1 + (s - 15) / 10, state="ramping"))
    b.on_event(Event(t=56.0, kind="stop"))
    b.on_tick(Tick(t=56.5, target_rps=0.0, state="stopping"))
    rows = b.snapshot(now=58.0).steps
    assert [(r.kind, r.start_s) for r in rows] == [
        ("ramp", 0.0),
        ("ramp", 10.0),
        ("ramp", 20.0),
        ("hold", 30.0),
        ("rate", 40.0),
        ("ramp", 45.0),  # the fourth tenth continues after the hold
        ("ramp", 55.0),
        ("drain", 56.0),
    ]
    assert (rows[0].target_lo_rps, rows[0].target_hi_rps) == (1.0, pytest.approx(1.9))
    assert rows[3].target_lo_rps == 4.0 and rows[4].target_lo_rps == 5.0
    assert rows[-1].end_s == 58.0
    assert [r.index for r in rows] == list(range(1, 9))


def test_checkpoint_keeps_the_rows_and_old_checkpoints_still_load():
    whole = SeriesBuilder()
    feed_steps(whole)
    meta, arrays = whole.export_state()
    restored = SeriesBuilder.from_state(whole.header, meta, arrays)
    for b in (whole, restored):
        b.on_request(ok(5000, 19.9, 0.3, 20.5))
        b.on_tick(Tick(t=20.5, target_rps=8.0, state="ramping"))
    assert restored.snapshot().steps == whole.snapshot().steps
    assert len(whole.snapshot().steps) == 3

    meta.pop("steps")  # what recordings written before the step table hold: unusable
    with pytest.raises(CheckpointTooOld):
        read_checkpoint(whole.header, meta, arrays)


def test_tracker_assigns_records_before_the_first_tick_to_the_first_row():
    t = StepTracker()
    t.configure("steps", 10.0)
    t.on_request(ok(0, 0.1, 0.01, 0.2))
    t.on_tick(0.5, "ramping", 3.0)
    rows = t.rows(1.0)
    assert len(rows) == 1 and rows[0].sent == 1 and rows[0].target_lo_rps == 3.0


def test_cells_and_text_table():
    b = SeriesBuilder()
    feed_steps(b)
    b.on_request(failed(999, 3.0, 5.0))
    rows = b.snapshot().steps
    cells = step_cells(rows[0])
    assert (
        cells["target rps"] == "2.0"
        and cells["errors"] == "1/21"
        and float(cells["TTFT p50"]) == pytest.approx(50, rel=0.01)
    )
    assert cells["start"] == "0:00" and step_cells(rows[1])["start"] == "0:10"
    text = step_table_text(rows).splitlines()
    assert len(text) == 3 and "TTFT p50 ms" in text[0] and "achieved rps" in text[0]
    assert all(len(line) == len(text[0]) for line in text)
    # on an 80-column terminal: column groups, each under the row number, no line folded
    for width in (80, 50):
        narrow = step_table_text(rows, width).split("\n\n")
        assert len(narrow) > 1
        assert all(len(line) <= width for block in narrow for line in block.splitlines())
        assert all([line.split()[0] for line in block.splitlines()] == ["#", "1", "2"] for block in narrow)
        headers = " ".join(block.splitlines()[0] for block in narrow)
        assert all(name in headers for name in ("achieved rps", "TTFT p99 ms", "waiting max"))


def test_a_row_without_requests_shows_dashes():
    t = StepTracker()
    t.configure("steps", 10.0)
    t.on_tick(0.0, "ramping", 1.0)
    t.on_event(Event(t=0.0, kind="stop"))
    (row,) = t.rows(0.0)
    assert row.kind == "drain" and math.isnan(row.achieved_rps)
    cells = step_cells(row)
    assert (cells["target rps"], cells["achieved rps"], cells["TTFT p99"], cells["KV % max"]) == ("–",) * 4


def test_a_row_younger_than_a_second_has_no_achieved_rate_yet():
    t = StepTracker()
    t.configure("steps", 10.0)
    t.on_tick(0.5, "ramping", 2.0)
    t.on_tick(5.0, "ramping", 4.0)
    t.on_request(ok(0, 4.9, 0.01, 5.2))
    first, second = t.rows(5.5)
    assert first.achieved_rps == pytest.approx(1 / 5.0)  # sent in the first row
    assert math.isnan(second.completed_rps) and math.isnan(second.output_tps) and second.completed == 1
    assert t.rows(6.0)[1].completed_rps == pytest.approx(1.0)


@pytest.mark.parametrize("resume", ["current", "start"])
def test_a_server_restart_is_a_row_at_zero_and_the_ramp_goes_on_as_resumed(resume):
    from rampwatch.core.figures.segments import config_event

    b = SeriesBuilder()
    b.on_start(header("linear", 100.0, start_rps=1, end_rps=11))
    for s in range(25):
        b.on_tick(Tick(t=float(s), target_rps=1 + s / 10, state="ramping"))
    b.on_event(Event(t=25.0, kind="set_rate", data={"before_rps": 3.5, "after_rps": 0.0, "restart": True}))
    for s in range(25, 30):  # the server restarting: 5 s held at 0
        b.on_tick(Tick(t=float(s), target_rps=0.0, state="restarting"))
    b.on_event(Event(t=30.0, kind="resume", data={"before_rps": 0.0, "after_rps": 3.5}))
    b.on_event(config_event(30.0, "vllm serve m --max-num-seqs 64", [("max_num_seqs", "8", "64")], resume, 25.0))
    for s in range(30, 41):
        b.on_tick(Tick(t=float(s), target_rps=2.0, state="ramping"))
    rows = b.snapshot(now=41.0).steps
    # ramp time after the restart: "current" goes on from 25 s (the 5 s restart excluded),
    # "start" from 0 again
    after = [("ramp", 30.0), ("ramp", 35.0)] if resume == "current" else [("ramp", 30.0), ("ramp", 40.0)]
    assert [(r.kind, r.start_s) for r in rows] == [
        ("ramp", 0.0),
        ("ramp", 10.0),
        ("ramp", 20.0),
        ("rate", 25.0),
        *after,
    ]
    assert rows[3].target_lo_rps == 0.0


def test_a_held_trace_is_one_row_while_its_target_follows_the_trace():
    b = SeriesBuilder()
    b.on_start(header("trace", 20.0, path="t.jsonl", format="mooncake", speed=1))
    for s in range(5):
        b.on_tick(Tick(t=float(s), target_rps=3.0 + s, state="ramping"))
    b.on_event(Event(t=5.0, kind="set_rate", data={"before_rps": 8.0, "after_rps": 16.0, "speed": 2.0}))
    for s, rps in zip(range(5, 10), (16.0, 12.0, 20.0, 4.0, 9.0)):  # the speed is held, the trace's rate moves
        b.on_tick(Tick(t=float(s), target_rps=rps, state="holding"))
    b.on_event(Event(t=10.0, kind="resume", data={"before_rps": 9.0, "after_rps": 4.5, "speed": 1.0}))
    b.on_tick(Tick(t=10.0, target_rps=4.5, state="ramping"))
    rows = b.snapshot(now=11.0).steps
    assert [(r.kind, r.start_s) for r in rows] == [
        ("ramp", 0.0),
        ("ramp", 2.0),
        ("ramp", 4.0),
        ("rate", 5.0),
        ("ramp", 10.0),
    ]
    assert (rows[3].target_lo_rps, rows[3].target_hi_rps) == (4.0, 20.0)


def feed_long_answers(b: SeriesBuilder, until: float) -> None:
    """Chat-like: 2 rps for 10 s then 4 rps until 21 s, every answer streaming for 15 s, nothing
    queued: the server keeps up, requests just last longer than a row. Ticks (with the
    oldest request in flight) and ended requests up to ``until``."""
    b.on_start(header("steps", 20.0))
    sends = [s + 0.5 + k / (2 if s < 10 else 4) for s in range(20) for k in range(2 if s < 10 else 4)]
    for step in range(int(until * 10) + 1):
        now = step / 10
        for i, sent in enumerate(sends):
            if now - 0.1 < sent + 15.0 <= now:
                b.on_request(ok(i, sent, 0.05, sent + 15.0, tokens=300, chunks=list(sent + 0.05 * np.arange(1, 301))))
        flying = [s for s in sends if s <= now < s + 15.0]
        state = "ramping" if now < 21 else "draining" if flying else "done"
        b.on_tick(
            Tick(
                t=now,
                target_rps=2.0 if now < 10.5 else 4.0,
                state=state,
                in_flight=len(flying),
                oldest_sent_at=flying[0] if flying else None,
            )
        )


def test_achieved_counts_the_rows_own_requests_so_a_server_that_keeps_up_achieves_the_offered_rate():
    b = SeriesBuilder()
    feed_long_answers(b, until=36.0)
    first, second, drain = b.snapshot().steps
    # every request sent in a row ended OK: achieved = offered (the old count, of requests
    # that *ended* in the row, read 0 and ~1.9 for a server with nothing waiting)
    assert first.achieved_rps == pytest.approx(20 / 10.5, rel=0.01) and not first.pending
    assert second.achieved_rps == pytest.approx(40 / 10.5, rel=0.01) and not second.pending
    assert step_cells(first)["achieved rps"] == "1.90"
    # what ended in the row, per second of it, is kept as the completion rate
    assert first.completed_rps == 0.0 and second.completed_rps == pytest.approx(12 / 10.5)  # sent 0.5–6.0
    assert drain.kind == "drain" and math.isnan(drain.achieved_rps) and drain.completed_rps > 0
    # the output tokens a row delivered are those streamed in it: a request sent at x
    # streamed (10.5 - x) / 0.05 tokens before the row's end
    streamed = sum((10.5 - (0.5 + k / 2)) / 0.05 for k in range(20))
    assert first.output_tps == pytest.approx(streamed / 10.5, rel=0.01)


def test_a_row_with_requests_still_in_flight_shows_its_achieved_rate_as_a_lower_bound():
    b = SeriesBuilder()
    feed_long_answers(b, until=22.0)  # the first row's requests ended at 15.5–25.0
    first, second, _drain = b.snapshot().steps
    assert first.pending and second.pending
    assert first.achieved_rps == pytest.approx(14 / 10.5, rel=0.01)
    assert step_cells(first)["achieved rps"] == "1.33+"
    assert step_cells(second)["achieved rps"] == "0.00+"
    b2 = SeriesBuilder()
    feed_long_answers(b2, until=26.0)  # the first row's are all over, the second's are not
    first, second, _drain = b2.snapshot().steps
    assert not first.pending and second.pending
    assert step_cells(first)["achieved rps"] == "1.90"


def test_a_row_whose_requests_were_cancelled_shows_its_achieved_rate_as_a_lower_bound():
    t = StepTracker()
    t.configure("steps", 20.0)
    t.on_tick(0.0, "ramping", 2.0)
    t.on_tick(10.0, "ramping", 4.0)
    t.on_event(Event(t=20.0, kind="stop"))
    t.on_request(ok(0, 1.0, 0.05, 9.0))
    t.on_request(ok(1, 11.0, 0.05, 19.0))
    cancelled = RequestRecord(id=2, scheduled_at=12.0, sent_at=12.0, end_at=50.0, error_class="cancelled")
    t.on_request(cancelled)
    first, second, _drain = t.rows(50.0)
    assert (second.sent, second.succeeded, second.cancelled, second.errors) == (2, 1, 1, 0)
    assert step_cells(first)["achieved rps"] == "0.10"
    assert step_cells(second)["achieved rps"] == "0.10+"  # would the cancelled one have ended OK? unknown


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [(100.0, 1, "100"), (99.96, 1, "100"), (99.94, 1, "99.9"), (5.0, 0, "5"), (float("nan"), 1, "–"), (None, 1, "–")],
)
def test_a_cell_reads_the_same_whatever_side_of_100_it_rounds_from(value, digits, text):
    from rampwatch.core.figures.steps import _num

    assert _num(value, digits) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(4.9996, "0:05"), (4.4, "0:04"), (0.0, "0:00"), (-0.2, "0:00"), (599.6, "10:00")]
)
def test_a_rows_start_reads_to_the_nearest_second(seconds, text):
    from rampwatch.core.figures.steps import _clock

    assert _clock(seconds) == text


def test_the_held_speed_kinds_are_the_trace_schedule():
    """The figures cannot import the sender: the schedule kind a step holds a speed for
    is written out there, and tied to the schedule's own name here."""
    assert HELD_SPEED_KINDS == (TRACE_KIND,)


def test_a_reasoning_runs_rows_have_a_ttfa_column_a_plain_runs_none():
    from rampwatch.core.figures.steps import step_columns, step_json
    from tests.core.figures.reasoning_records import reasoning_record

    tracker = StepTracker()
    tracker.configure("steps", 20.0)
    tracker.on_tick(0.0, "ramping", 1.0)
    tracker.on_request(ok(0, 0.1, 0.2, 0.5))  # before any reasoning: its row has no TTFA
    tracker.on_tick(5.0, "ramping", 2.0)
    thinking = reasoning_record(
        1, sent_at=5.5, first_token_at=6.0, chunk_times=(6.1, 6.2, 6.5, 6.6), first_answer_at=6.5
    )
    tracker.on_request(thinking)
    tracker.on_request(ok(2, 5.6, 0.3, 7.0))  # after it, a plain request's TTFA is its TTFT
    first, second = tracker.rows(8.0)
    assert first.ttfa_p99 is not None and math.isnan(first.ttfa_p99)
    assert second.ttfa_p99 == pytest.approx(0.3 + (1.0 - 0.3) * 0.99, rel=0.02)  # p99 of 1.0 s and 0.3 s
    assert [name for name, _ in step_columns([first, second])][7:10] == ["TTFT p99", "TTFA p99", "ITL p50"]
    assert step_cells(first)["TTFA p99"] == "–"
    assert "TTFA p99 ms" in step_table_text([first, second]).splitlines()[0]
    assert step_json(second)["ttfa_p99"] == second.ttfa_p99
    arrays: dict[str, np.ndarray] = {}
    restored = StepTracker.restore_state(tracker.export_state(arrays), arrays)
    assert restored.rows(8.0) == tracker.rows(8.0)

    plain = StepTracker()
    plain.on_tick(0.0, "ramping", 1.0)
    plain.on_request(ok(0, 0.1, 0.2, 0.5))
    (row,) = plain.rows(1.0)
    assert row.ttfa_p99 is None and "ttfa_p99" not in step_json(row) and "TTFA p99" not in step_cells(row)
    assert "TTFA" not in step_table_text([row])
    assert "ttfa" not in plain.export_state({})


def test_a_speculating_server_gives_each_row_its_acceptance_and_the_table_its_columns():
    b = SeriesBuilder()
    b.on_start(header("steps", 20.0))
    b.on_tick(Tick(t=0.5, target_rps=2.0, state="ramping"))
    accepted = 0.0
    for t in range(1, 21):
        if t == 11:
            b.on_tick(Tick(t=10.5, target_rps=4.0, state="ramping"))
        accepted += 2.0 if t <= 10 else 1.0  # each draft: 2 accepted in the first step, 1 in the second
        b.on_scrape(ServerSample(t=float(t), url="u", ok=True, backend="vllm", spec_drafts_total=10.0 * t,
                                 spec_draft_tokens_total=30.0 * t, spec_accepted_tokens_total=10.0 * accepted))  # fmt: skip
    first, second = b.snapshot().steps
    assert first.spec_acceptance_pct == pytest.approx(200 / 3) and first.spec_accept_len == pytest.approx(3.0)
    assert second.spec_acceptance_pct == pytest.approx(100 / 3) and second.spec_accept_len == pytest.approx(2.0)
    text = step_table_text([first, second])
    assert "accept %" in text and "accept len" in text and "3.00" in text
    assert step_json(first)["spec_accept_len"] == pytest.approx(3.0)
    meta, arrays = b.export_state()  # a checkpoint keeps them
    assert SeriesBuilder.from_state(b.header, meta, arrays).snapshot().steps == [first, second]


def test_a_plain_servers_table_and_rows_have_no_speculation():
    b = SeriesBuilder()
    feed_steps(b)
    rows = b.snapshot().steps
    assert "accept" not in step_table_text(rows)
    assert not any(key.startswith("spec_") for key in step_json(rows[0]))
    assert "spec" not in b.export_state()[0]["steps"]
