"""Seek checkpoints stored in the file by the writer: a restored replay equals a straight feed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import SERIES_NAMES, Event, RequestRecord
from rampwatch.record import format as fmt
from rampwatch.record.reader import open_recording
from rampwatch.record.replay import ReplayTimeline, feed
from rampwatch.record.writer import RecordingWriter, SeriesCheckpointer
from tests.synthetic import SyntheticRun, play_synthetic


def _write(path, every=5.0, duration=40.0, **run):
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=every)
    options = dict(
        duration_s=duration, start_rps=2, end_rps=20, capacity_rps=12, mean_chunks=30, marks=[(7.3, "here")], seed=11
    )
    options.update(run)
    play_synthetic(SyntheticRun(**options), writer, on_flush=lambda _t: writer.flush())
    return writer


def _straight(rec, t):
    b = SeriesBuilder()
    b.on_start(rec.header)
    feed(b, rec.items_between(float("-inf"), t))
    return b.snapshot(now=t)


def _assert_same(got, want):
    assert got.times == want.times
    for name in SERIES_NAMES:
        np.testing.assert_array_equal(np.array(got.series[name]), np.array(want.series[name]), err_msg=name)
    assert got.events == want.events
    assert got.state == want.state and got.in_flight == want.in_flight and got.target_rps == want.target_rps
    assert _rows(got.steps) == _rows(want.steps)
    assert got.summary.keys() == want.summary.keys()
    for key, value in want.summary.items():
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(got.summary[key]), key
        else:
            assert got.summary[key] == value, key


def _rows(steps):
    """Step rows as comparable values (NaN equal to NaN)."""
    return [{k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in r.to_dict().items()} for r in steps]


@pytest.mark.slow
def test_checkpoints_from_before_the_step_table_replay_from_the_start(tmp_path, monkeypatch):
    """A file whose checkpoints have no step rows still replays, with the whole table."""
    export = SeriesBuilder.export_state

    def without_steps(self):
        meta, arrays = export(self)
        meta.pop("steps")
        arrays.pop("steps.hists", None)
        return meta, arrays

    monkeypatch.setattr(SeriesBuilder, "export_state", without_steps)
    path = tmp_path / "old.rwrec"
    _write(path)
    monkeypatch.undo()
    rec = open_recording(path)
    assert rec.checkpoint_times
    tl = ReplayTimeline(rec, clock=lambda: 0.0)
    for t in (33.2, 12.75, rec.duration_s):
        tl.seek(t)
        got = tl.snapshot()
        assert len(got.steps) >= 3
        _assert_same(got, _straight(rec, t))
    assert not tl.uses_stored_checkpoints
    from rampwatch.record.analysis import final_snapshot

    assert _rows(final_snapshot(rec).steps) == _rows(_straight(rec, rec.duration_s).steps)


def test_writer_stores_checkpoints_and_seeks_restore_them_exactly(tmp_path):
    path = tmp_path / "r.rwrec"
    _write(path)
    rec = open_recording(path)
    assert rec.warnings == []
    # every 5 s up to the last item minus the 5 s feeding lag
    assert rec.checkpoint_times[:3] == [5.0, 10.0, 15.0] and len(rec.checkpoint_times) >= 8
    tl = ReplayTimeline(rec, clock=lambda: 0.0)
    assert tl.uses_stored_checkpoints and tl.checkpoint_count == len(rec.checkpoint_times)
    for t in (33.2, 5.0, 12.75, 0.4, 41.0, 26.0, rec.duration_s):
        tl.seek(t)
        _assert_same(tl.snapshot(), _straight(rec, t))


def test_builder_state_round_trips_through_the_checkpoint_codec(tmp_path):
    path = tmp_path / "r.rwrec"
    _write(path, every=None)
    rec = open_recording(path)
    assert rec.checkpoint_frames == []
    live = SeriesBuilder(slo={"ttft": 200}, gpu_price_per_hour=2.0)
    live.on_start(rec.header)
    items = rec.items_between(float("-inf"), rec.duration_s)
    half = len(items) // 2
    feed(live, items[:half])
    t, state, arrays = fmt.decode_checkpoint(fmt.encode_checkpoint(items[half].t, *live.export_state()))
    restored = SeriesBuilder.from_state(rec.header, state, arrays)
    feed(live, items[half:])
    feed(restored, items[half:])
    for b in (live, restored):
        b.on_finish(rec.duration_s)
    _assert_same(restored.snapshot(), live.snapshot())
    assert repr(restored.take_completed_seconds()) == repr(live.take_completed_seconds())  # NaN-safe


def test_checkpoints_written_before_a_late_item_are_not_used(tmp_path):
    """An item written after a checkpoint but timed before it would be missing from the
    restored state; the reader sees it from the frame heads and ignores that checkpoint."""
    path = tmp_path / "late.rwrec"
    writer = _write(path, duration=30.0)
    rec_before = open_recording(path)
    assert len(rec_before.checkpoint_times) >= 4
    with open(path, "ab") as f:  # a requests frame timed at 12 s, appended at the end
        late = RequestRecord(10**6, 11.9, 11.9, 12.0, 11.95, [11.97], 5, 2, finish_reason="length", status=200)
        f.write(fmt.frame(fmt.KIND_REQUESTS, fmt.encode_requests([late]), 1, 12.0, 12.0))
    rec = open_recording(path)
    assert rec.checkpoint_times and max(rec.checkpoint_times) < 12.0
    tl = ReplayTimeline(rec, clock=lambda: 0.0)
    tl.seek(20.0)
    _assert_same(tl.snapshot(), _straight(rec, 20.0))
    assert writer.error is None


def test_checkpointer_stops_on_an_item_older_than_what_it_fed():
    cp = SeriesCheckpointer(every_s=2.0, lag_s=1.0)
    from rampwatch.core.timeline import RunHeader, Tick

    cp.start(RunHeader("0", 0.0, "http://x", "m", "s"))
    cp.add_meta(fmt.encode_meta([], [Tick(float(s), 1.0, "ramping") for s in range(6)], []))
    assert len(cp.frames()) == 2  # at 2 s and 4 s (newest item 5 s, lag 1 s)
    cp.add_meta(fmt.encode_meta([], [], [Event(3.0, "mark", "late")]))
    assert cp.stopped and cp.frames() == []


def test_old_files_without_checkpoints_still_seek_by_feeding(tmp_path):
    path = tmp_path / "old.rwrec"
    _write(path, every=None, duration=20.0)
    rec = open_recording(path)
    tl = ReplayTimeline(rec, clock=lambda: 0.0, warm_up=False, checkpoint_every_s=4)
    assert not tl.uses_stored_checkpoints
    for t in (15.5, 3.0):
        tl.seek(t)
        _assert_same(tl.snapshot(), _straight(rec, t))


def test_checkpoint_codec_rejects_foreign_array_types():
    payload = fmt.encode_checkpoint(1.0, {}, {"counts": np.array(["a"], dtype="U1")})
    with pytest.raises(ValueError, match="unexpected array type"):
        fmt.decode_checkpoint(payload)


def _close(a, b, key):
    if isinstance(b, float) and math.isnan(b):
        assert math.isnan(a), key
    elif isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), key
    else:
        assert a == b, key


@pytest.mark.parametrize("error_rate, slo", [(0.0, None), (0.1, {"ttft": 300, "tpot_ms": 30})])
def test_streamed_summary_equals_the_record_by_record_one(tmp_path, error_rate, slo):
    from rampwatch.core.figures.summary import summarise_requests
    from rampwatch.record.analysis import summarise

    path = tmp_path / "r.rwrec"
    _write(path, duration=30.0, error_rate=error_rate)
    rec = open_recording(path)
    streamed = summarise(rec, slo=slo, gpu_price_per_hour=3.0).to_dict()
    exact = summarise_requests(
        rec.header, rec.requests, rec.samples, rec.events, slo=slo, gpu_price_per_hour=3.0
    ).to_dict()
    assert streamed.keys() == exact.keys()
    assert streamed["completed"] > 100 and (streamed["failed"] > 0) == (error_rate > 0)
    for key, value in exact.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                _close(streamed[key][sub], v, f"{key}.{sub}")
        else:
            _close(streamed[key], value, key)


def test_itl_order_statistics_match_numpy_with_long_gaps():
    from rampwatch.core.figures import stats

    rng = np.random.default_rng(4)
    us = np.concatenate([rng.integers(1, 80_000, 5000), rng.integers(5_000_000, 400_000_000, 7), [0, 0]])
    values = us / 1e6
    acc = stats.MicrosecondCounts()
    for part in np.array_split(rng.permutation(values), 9):
        acc.add(part)
    got, want = acc.describe_ms((50, 90, 99, 99.9)), stats.describe_ms(values, (50, 90, 99, 99.9))
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-9), key
    assert stats.MicrosecondCounts().describe_ms((50,)) == stats.describe_ms([], (50,))


@pytest.mark.parametrize("detailed", [False, True])
def test_streamed_json_export_equals_the_in_memory_result(tmp_path, detailed):
    import json

    from rampwatch.core.figures.summary import to_bench_result
    from rampwatch.record.analysis import summarise
    from rampwatch.record.result_json import write_bench_result

    path = tmp_path / "r.rwrec"
    _write(path, duration=20.0, error_rate=0.1)
    rec = open_recording(path)
    summary = summarise(rec)
    write_bench_result(rec, summary, tmp_path / "out.json", detailed)
    got = json.loads((tmp_path / "out.json").read_text())
    want = json.loads(json.dumps(to_bench_result(summary, rec.header, rec.requests, detailed=detailed), default=str))
    assert got == want


def test_the_send_lateness_read_back_is_the_runs(tmp_path):
    """The run's send lateness (records in memory) and `rampwatch report`'s (the recording
    read back) are the same figures, the requests never sent left out of both."""
    from rampwatch.core.figures.summary import summarise_requests
    from rampwatch.core.timeline import CANCELLED, RunHeader
    from rampwatch.record.analysis import summarise

    def request(i, late_s, error=None, never_sent=False):
        due = 1.0 + i * 0.01
        sent = due + late_s
        end = sent if never_sent else sent + 0.2
        ok = error is None
        return RequestRecord(
            i, due, sent, end, first_token_at=sent + 0.05 if ok else None, completion_tokens=int(ok), error_class=error
        )

    rng = np.random.default_rng(7)
    records = [request(i, float(late)) for i, late in enumerate(rng.exponential(0.003, 200))]
    records += [request(200, 0.02, "http_500"), request(201, 0.5, CANCELLED, never_sent=True)]
    path = tmp_path / "late.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None, checkpoint_every_s=None)
    writer.on_start(RunHeader("0", 1.7e9, "http://x", "tiny", "s"))
    for r in records:
        writer.on_request(r)
    writer.on_finish(5.0)
    writer.close()

    run = summarise_requests(None, records, [], []).send_lateness
    with open_recording(path) as rec:
        report = summarise(rec).send_lateness
    assert run is not None and report is not None
    assert run.max == pytest.approx(20.0)  # the failed request's; the one never sent (500 ms) left out
    for got, want in zip((report.p50, report.p99, report.max), (run.p50, run.p99, run.max), strict=True):
        assert got == pytest.approx(want, abs=2e-3)  # the recording keeps times to 1 µs


@pytest.mark.parametrize(
    "spoil",
    [
        lambda state: state.update(schema=99),  # written by a newer rampwatch
        lambda state: state.update(schema="two"),
        lambda state: state.update(schema=[2]),
        lambda state: state.update({k: "x" for k in list(state)}),  # fields of the wrong types
    ],
    ids=["newer-schema", "schema-text", "schema-list", "fields-wrong-type"],
)
def test_the_final_summary_builds_from_the_start_past_an_unusable_checkpoint(tmp_path, monkeypatch, spoil):
    """`report` and `export` (``final_snapshot``) read the last checkpoint: one they cannot
    restore is skipped, as the replay skips it, instead of ending in a traceback."""
    from rampwatch.record import checkpoint
    from rampwatch.record.analysis import final_snapshot

    path = tmp_path / "r.rwrec"
    _write(path, duration=12.0)
    rec = open_recording(path)
    assert rec.checkpoint_times
    want = final_snapshot(rec)
    stored = rec.checkpoint

    def spoilt(t):
        found = stored(t)
        if found is None:
            return None
        cp_time, state, arrays = found
        state = dict(state)
        spoil(state)
        return cp_time, state, arrays

    monkeypatch.setattr(rec, "checkpoint", spoilt)
    with pytest.raises((ValueError, TypeError, AttributeError)):
        checkpoint.stored_builder(rec, rec.duration_s)
    _assert_same(final_snapshot(rec), want)
