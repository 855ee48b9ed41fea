import math

import numpy as np
import pytest

from rampwatch.core.figures.knee import KneeDetector, feed
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import RequestRecord, Tick


def synthetic_ramp(capacity=20.0, start=1.0, end=40.0, seconds=240, seed=0, server=True, noise=0.1):
    """A server that completes min(offered, capacity) req/s; the excess queues up."""
    rng = np.random.default_rng(seed)
    queue = 0.0
    rows = []
    for i in range(seconds):
        offered = start + (end - start) * i / (seconds - 1)
        served = min(offered + queue, capacity)
        queue = max(0.0, queue + offered - served)
        ttft = 0.08 + queue / capacity  # queued requests wait for a slot
        row = {
            "target_rps": offered,
            "offered_rps": float(rng.poisson(offered)),
            "completed_rps": max(0.0, served * (1 + rng.normal(0, noise))),
            "error_rps": 0.0,
            "ttft_p50": ttft * (1 + rng.normal(0, noise)),
            "waiting": queue + rng.poisson(1) if server else math.nan,
            "kv_usage_pct": min(100.0, 30 + 60 * offered / end) if server else math.nan,
            "preemptions": 0.0 if server else math.nan,
        }
        rows.append((float(i), row))
    return rows


def run(rows, **kw):
    det = KneeDetector(**kw)
    return [e for t, v in rows if (e := det.update(t, v)) is not None]


@pytest.mark.parametrize("capacity", [10.0, 20.0, 30.0])
@pytest.mark.parametrize("server", [True, False])
def test_ramp_knee_found_near_capacity(capacity, server):
    events = run(synthetic_ramp(capacity=capacity, server=server))
    knees = [e for e in events if e.kind == "knee"]
    assert len(knees) == 1
    assert knees[0].data["offered_rps"] == pytest.approx(capacity, rel=0.2)
    assert len(knees[0].data["evidence"]) >= 2
    if not server:
        assert all(not e.startswith(("queue_growth", "kv_pressure")) for e in knees[0].data["evidence"])


@pytest.mark.parametrize("seed", range(5))
def test_noise_alone_gives_no_knee(seed):
    rng = np.random.default_rng(seed)
    det = KneeDetector()
    for i in range(600):
        rate = 15.0
        values = {
            "target_rps": rate,
            "completed_rps": float(rng.poisson(rate)),
            "error_rps": 0.0,
            "ttft_p50": 0.1 * math.exp(rng.normal(0, 0.3)),
            "waiting": float(rng.poisson(2)),
            "kv_usage_pct": 50 + rng.normal(0, 5),
            "preemptions": 0.0,
        }
        assert det.update(float(i), values) is None


def test_recovery_event_then_rearm():
    rows = synthetic_ramp(capacity=20.0, seconds=200)
    det = KneeDetector(recover_s=10)
    events = [e for t, v in rows if (e := det.update(t, v)) is not None]
    assert [e.kind for e in events] == ["knee"]
    calm = {
        "target_rps": 5.0,
        "completed_rps": 5.0,
        "error_rps": 0.0,
        "ttft_p50": 0.08,
        "waiting": 0.0,
        "kv_usage_pct": 20.0,
        "preemptions": 0.0,
    }
    later = [e for i in range(200, 260) if (e := det.update(float(i), calm)) is not None]
    assert [e.kind for e in later] == ["info"] and later[0].data["knee_recovered"]
    assert not det.in_knee


def test_kv_pressure_and_queue_are_server_evidence():
    det = KneeDetector()
    events = []
    for i in range(60):
        values = {
            "target_rps": 10.0,
            "completed_rps": 10.0,
            "error_rps": 0.0,
            "ttft_p50": 0.1,
            "waiting": max(0.0, (i - 20) * 2.0),
            "kv_usage_pct": 99.0 if i > 20 else 50.0,
            "preemptions": 1.0 if i > 20 else 0.0,
        }
        if (e := det.update(float(i), values)) is not None:
            events.append(e)
    assert len(events) == 1
    assert {ev.split(":")[0] for ev in events[0].data["evidence"]} == {"queue_growth", "kv_pressure"}


def test_fed_from_series_builder():
    """End to end on records: a server saturating at 8 req/s under a ramp to 16 req/s."""
    builder, det = SeriesBuilder(), KneeDetector()
    capacity, free_at, rid, knees = 8.0, 0.0, 0, []
    for sec in range(120):
        rate = 2 + 14 * sec / 119
        builder.on_tick(Tick(t=float(sec), target_rps=rate, state="ramping"))
        n = int(rate)
        for k in range(n):
            t = sec + k / n
            start = max(t, free_at)  # one queue, service time 1/capacity
            free_at = start + 1 / capacity
            first = start + 0.05
            builder.on_request(
                RequestRecord(
                    id=rid,
                    scheduled_at=t,
                    sent_at=t,
                    end_at=first + 0.2,
                    first_token_at=first,
                    chunk_times=[first + 0.1, first + 0.2],
                    completion_tokens=3,
                    prompt_tokens=10,
                )
            )
            rid += 1
        knees += [e for e in feed(builder, det) if e.kind == "knee"]
    assert len(knees) == 1
    assert knees[0].data["offered_rps"] == pytest.approx(capacity, rel=0.25)
