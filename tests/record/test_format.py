"""Round trips of the v1 block codecs and of whole recordings."""

from __future__ import annotations

import random
import zlib

import pytest

from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.record import format as fmt
from rampwatch.record.reader import open_recording
from rampwatch.record.writer import RecordingWriter, default_recording_path
from tests.record.helpers import CaptureSink, assert_request_close
from tests.synthetic import SyntheticRun, play_synthetic


def _requests(pattern: str, n: int = 40, seed: int = 1) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    step_times, t = [], 0.5
    for _ in range(4000):  # engine steps of ~25 ms with some jitter, as a batch decodes
        t += 0.025 + rng.gauss(0, 0.0005)
        step_times.append(t)
    for i in range(n):
        sched = rng.uniform(0, 50)
        sent = sched + rng.random() * 0.01
        if pattern == "errors" and i % 2:
            out.append(
                RequestRecord(
                    i,
                    sched,
                    sent,
                    sent + 0.01,
                    status=500 if i % 4 == 1 else None,
                    error_class="http_500" if i % 4 == 1 else "timeout",
                    error="boom",
                )
            )
            continue
        first = sent + rng.uniform(0.01, 0.5)
        if pattern == "bursts":  # chunks on a shared engine-step grid plus jitter
            k0 = next(k for k, s in enumerate(step_times) if s > first)
            chunks = [step_times[k0 + j] + rng.expovariate(1 / 60e-6) for j in range(rng.randint(0, 200))]
        elif pattern == "random":
            chunks = sorted(first + rng.uniform(0, 30) for _ in range(rng.randint(0, 50)))
        elif pattern == "long-gaps":  # a stall of minutes between chunks
            chunks = [first + 0.02, first + 0.04, first + 400.0, first + 400.01]
        else:
            chunks = []
        out.append(
            RequestRecord(
                id=i * 7 + 3,
                scheduled_at=sched,
                sent_at=sent,
                end_at=(chunks[-1] if chunks else first) + 0.001,
                first_token_at=first,
                chunk_times=chunks,
                prompt_tokens=rng.randint(1, 9000),
                completion_tokens=len(chunks) + 1,
                tokens_from_usage=bool(i % 3),
                finish_reason="length",
                status=200,
                scenario_tag=f"doc-{i % 5}" if i % 2 else None,
            )
        )
    return out


@pytest.mark.parametrize("pattern", ["bursts", "random", "long-gaps", "no-chunks", "errors"])
def test_request_block_round_trip(pattern):
    records = _requests(pattern)
    decoded = fmt.decode_requests(fmt.encode_requests(records))
    assert len(decoded) == len(records)
    for a, b in zip(records, decoded):
        assert_request_close(a, b)


def test_session_class_and_cache_fields_round_trip():
    records = _requests("random")
    for i, r in enumerate(records):
        r.request_class = ("chat", "code", None)[i % 3]
        r.session, r.turn = (i // 4, i % 4 + 1) if i % 5 else (None, None)
        r.cached_tokens = None if i % 7 == 0 else 16 * i
    decoded = fmt.decode_requests(fmt.encode_requests(records))
    for a, b in zip(records, decoded):
        assert_request_close(a, b)


def test_plain_blocks_carry_no_optional_columns():
    """A run without sessions, classes or cache counts writes its blocks as before."""
    records = _requests("random")
    columns = fmt.decode_request_columns(fmt.encode_requests(records))
    assert not set(fmt.OPTIONAL_REQUEST_FIELDS) & set(columns.strings)
    assert all(r.session is None and r.cached_tokens is None for r in fmt.decode_requests(fmt.encode_requests(records)))


def test_chunk_times_keep_order_and_quantum():
    records = _requests("bursts")
    decoded = fmt.decode_requests(fmt.encode_requests(records, chunk_quantum_us=1))
    for a, b in zip(records, decoded):
        assert_request_close(a, b, chunk_tol=1e-6)
        assert b.chunk_times == sorted(b.chunk_times)


def test_burst_coding_beats_plain_deltas():
    """The codec must exploit shared engine steps: the whole block (scalars included) must be
    smaller than the chunk times alone coded as plain per-request deltas."""
    records = _requests("bursts", n=80)
    coded = len(fmt.encode_requests(records))
    import numpy as np

    plain = np.concatenate(
        [np.diff(np.rint(np.array([r.first_token_at] + r.chunk_times) * 1e5)) for r in records if r.chunk_times]
    ).astype(np.int32)
    assert coded < len(zlib.compress(plain.tobytes(), 6))


def test_meta_round_trip_is_exact():
    samples = [
        ServerSample(
            t=1.25,
            url="http://h/metrics",
            ok=True,
            backend="vllm",
            running=3.0,
            kv_usage=0.125,
            per_engine={"0": {"running": 3.0}},
            raw={'vllm:num_requests_running{engine="0"}': 3.0},
        )
    ]
    ticks = [Tick(1.0, 2.5, "ramping", in_flight=4, client_queued=1)]
    events = [Event(1.5, "mark", "note é", {"note": "note é"})]
    assert fmt.decode_meta(fmt.encode_meta(samples, ticks, events)) == (samples, ticks, events)


def test_recording_round_trip(tmp_path):
    run = SyntheticRun(duration_s=20, end_rps=8, mean_chunks=30, marks=[(5.0, "first")], seed=3)
    captured = CaptureSink()
    play_synthetic(run, captured)
    path = tmp_path / "r.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    play_synthetic(run, writer, on_flush=lambda _t: writer.flush())

    rec = open_recording(path)
    assert rec.warnings == []
    assert rec.finished and rec.duration_s == captured.finish_t
    assert rec.header == captured.header
    assert rec.samples == captured.samples
    assert rec.ticks == captured.ticks
    assert rec.events == captured.events
    assert len(rec.requests) == len(captured.requests) > 50
    for a, b in zip(captured.requests, rec.requests):
        assert_request_close(a, b)
    assert [e.kind for e in rec.marks()] == ["mark"] or [e.kind for e in rec.marks()] == ["mark", "knee"]


def test_items_between_is_ordered_and_partitions_the_stream(tmp_path):
    path = tmp_path / "r.rwrec"
    writer = RecordingWriter(path, flush_interval_s=None)
    play_synthetic(SyntheticRun(duration_s=15, end_rps=6, mean_chunks=20), writer, on_flush=lambda _t: writer.flush())
    rec = open_recording(path)
    whole = rec.items_between(float("-inf"), rec.duration_s)
    parts = rec.items_between(float("-inf"), 4.3) + rec.items_between(4.3, 9.0) + rec.items_between(9.0, rec.duration_s)
    key = [(i.kind, i.t) for i in whole]
    assert key == [(i.kind, i.t) for i in parts]
    assert [i.t for i in whole] == sorted(i.t for i in whole)
    assert len(whole) == len(rec.requests) + len(rec.samples) + len(rec.ticks) + len(rec.events)


def test_default_recording_path():
    from datetime import datetime

    p = default_recording_path("chat / long", datetime(2026, 11, 22, 14, 30, 0))
    assert str(p) == "recordings/20261122-143000-chat---long.rwrec"


def test_writer_background_thread_flushes_without_help(tmp_path):
    import time

    path = tmp_path / "live.rwrec"
    writer = RecordingWriter(path, flush_interval_s=0.05)
    writer.on_start(RunHeader("0", 0.0, "http://x", "m", "s"))
    writer.on_tick(Tick(0.0, 1.0, "ramping"))
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(open_recording(path).ticks) == 0:
        time.sleep(0.02)
    assert open_recording(path).ticks == [Tick(0.0, 1.0, "ramping")]
    writer.on_finish(1.0)
    assert open_recording(path).finished
