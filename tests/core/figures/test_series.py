import math

import numpy as np
import pytest

from rampwatch.core.figures.series import FOLD_AT_QUEUED, SeriesBuilder
from rampwatch.core.timeline import SERIES_NAMES, Event, RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.record.checkpoint import read_checkpoint

NAN = math.nan


def rec(i, scheduled, sent, first, end, tokens=4, error=None, chunks=None):
    return RequestRecord(
        id=i,
        scheduled_at=scheduled,
        sent_at=sent,
        end_at=end,
        first_token_at=first,
        chunk_times=chunks if chunks is not None else ([end] if first is not None else []),
        completion_tokens=tokens,
        prompt_tokens=10,
        error_class=error,
    )


def same(a, b):
    return len(a) == len(b) and all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y) for x, y in zip(a, b))


def test_request_bins_and_ticks():
    b = SeriesBuilder()
    b.on_start(
        RunHeader(
            rampwatch_version="0", started_at_unix=0, target="t", model="m", scenario_name="s", planned_duration_s=60
        )
    )
    b.on_tick(Tick(t=0.0, target_rps=2.0, state="ramping", in_flight=0))
    b.on_request(rec(0, 0.2, 0.3, 0.5, 1.2, tokens=5))
    b.on_request(rec(1, 0.9, 1.4, 1.6, 2.5, tokens=7))
    b.on_tick(Tick(t=1.0, target_rps=3.0, state="ramping", in_flight=2))
    b.on_request(rec(2, 1.5, 1.5, None, 2.7, error="http_500"))
    b.on_tick(Tick(t=2.0, target_rps=4.0, state="holding", in_flight=1))
    b.on_tick(Tick(t=3.0, target_rps=4.0, state="holding", in_flight=0))
    snap = b.snapshot()
    assert snap.times == [0.0, 1.0, 2.0]  # whole seconds only while running
    s = snap.series
    assert set(s) == set(SERIES_NAMES)
    assert s["offered_rps"] == [2.0, 1.0, 0.0]
    assert s["sent_rps"] == [1.0, 2.0, 0.0]
    assert s["completed_rps"] == [0.0, 1.0, 1.0]
    assert s["error_rps"] == [0.0, 0.0, 1.0]
    assert s["client_output_tps"] == [0.0, 5.0, 7.0]
    assert s["target_rps"] == [2.0, 3.0, 4.0] and s["in_flight"] == [0.0, 2.0, 1.0]
    assert all(math.isnan(v) for v in s["running"])  # no /metrics
    assert not snap.server_metrics_available
    assert (snap.state, snap.target_rps, snap.planned_duration_s) == ("holding", 4.0, 60)
    assert snap.summary["completed"] == 2 and snap.summary["failed"] == 1
    b.on_finish(3.4)
    done = b.snapshot()
    assert done.state == "done" and done.times[-1] == 3.0


def scrape(
    t,
    url,
    gen,
    prompt=None,
    hits=None,
    queries=None,
    running=1.0,
    waiting=0.0,
    kv=0.25,
    preempt=0.0,
    created=1.0,
    ok=True,
):
    return ServerSample(
        t=t,
        url=url,
        ok=ok,
        backend="vllm",
        running=running,
        waiting=waiting,
        kv_usage=kv,
        generation_tokens_total=gen,
        prompt_tokens_total=prompt if prompt is not None else gen * 10,
        prefix_hits_total=hits,
        prefix_queries_total=queries,
        preemptions_total=preempt,
        created=created,
    )


def test_counter_rates_spread_over_scrape_intervals():
    b = SeriesBuilder()
    b.on_scrape(scrape(0.5, "a", 0))
    b.on_scrape(scrape(1.5, "a", 100))  # 100 tok/s over [0.5, 1.5]
    b.on_scrape(scrape(2.5, "a", 300))  # 200 tok/s over [1.5, 2.5]
    b.on_finish(3.0)
    s = b.snapshot().series
    assert same(s["server_generation_tps"], [100.0, 150.0, 200.0])
    assert same(s["server_prompt_tps"], [1000.0, 1500.0, 2000.0])
    assert same(s["running"], [1.0, 1.0, 1.0]) and same(s["kv_usage_pct"], [25.0, 25.0, 25.0])


def test_two_replicas_summed_and_reset_safe():
    b = SeriesBuilder()
    for t, ga, gb in [(0.0, 0, 1000), (1.0, 50, 1010), (2.0, 100, 20)]:  # replica b restarts before t=2
        b.on_scrape(scrape(t, "a", ga, running=2.0, kv=0.2))
        b.on_scrape(scrape(t, "b", gb, running=3.0, kv=0.4, created=1.0 if t < 2 else 5.0))
    b.on_finish(2.0)
    s = b.snapshot().series
    assert same(s["server_generation_tps"], [60.0, 70.0])
    assert same(s["running"], [5.0, 5.0]) and same(s["kv_usage_pct"], [30.0, 30.0])
    assert b.snapshot().summary["server"]["available"]


def test_failed_scrapes_leave_gaps_not_zeros():
    b = SeriesBuilder()
    b.on_scrape(scrape(0.1, "a", 0))
    b.on_scrape(ServerSample(t=1.1, url="a", ok=False, error="timeout"))
    b.on_scrape(scrape(2.1, "a", 200))
    b.on_finish(3.0)
    s = b.snapshot().series
    assert same(s["running"], [1.0, NAN, 1.0])
    assert same(s["server_generation_tps"], [100.0, 100.0, 100.0])  # the counter spans the gap


def test_prefix_hit_rate_over_window():
    b = SeriesBuilder(window_s=2)
    b.on_scrape(scrape(0.0, "a", 0, hits=0, queries=0))
    b.on_scrape(scrape(1.0, "a", 0, hits=10, queries=100))
    b.on_scrape(scrape(2.0, "a", 0, hits=100, queries=200))
    b.on_scrape(scrape(3.0, "a", 0, hits=100, queries=200))  # no traffic: window still has the last second
    b.on_finish(3.0)
    s = b.snapshot().series
    assert same(s["prefix_hit_pct"], [10.0, 50.0, 90.0])


def test_preemptions_per_second():
    b = SeriesBuilder()
    b.on_scrape(scrape(0.0, "a", 0, preempt=0))
    b.on_scrape(scrape(1.0, "a", 0, preempt=3))
    b.on_scrape(scrape(2.0, "a", 0, preempt=3))
    b.on_finish(2.0)
    assert same(b.snapshot().series["preemptions"], [3.0, 0.0])


def test_latency_percentiles_over_sliding_window():
    b = SeriesBuilder(window_s=2)
    # second 0: TTFT 0.1 s; second 1: TTFT 0.3 s; second 2: nothing
    b.on_request(rec(0, 0.0, 0.0, 0.1, 0.5, chunks=[0.3, 0.5]))
    b.on_request(rec(1, 1.0, 1.0, 1.3, 1.6, chunks=[1.6]))
    b.on_tick(Tick(t=10.0, target_rps=1.0, state="holding"))
    s = b.snapshot().series
    assert s["ttft_p50"][0] == pytest.approx(0.1, rel=0.01)
    assert s["ttft_p50"][1] == pytest.approx(0.2, rel=0.02)  # both requests in the 2 s window
    assert s["ttft_p50"][2] == pytest.approx(0.3, rel=0.01)  # only the second one left
    assert math.isnan(s["ttft_p50"][3])
    assert s["itl_p50"][0] == pytest.approx(0.2, rel=0.01)
    assert s["itl_p99"][1] == pytest.approx(0.3, rel=0.02)


def stream(seed=0, seconds=30):
    rng = np.random.default_rng(seed)
    items = []
    rid = 0
    for sec in range(seconds):
        items.append(
            ("tick", Tick(t=float(sec), target_rps=5.0 + sec, state="ramping", in_flight=int(rng.integers(0, 9))))
        )
        items.append(
            ("scrape", scrape(sec + 0.05, "a", 100.0 * sec, waiting=float(sec), hits=10.0 * sec, queries=40.0 * sec))
        )
        for _ in range(5 + sec):
            t = sec + float(rng.random())
            first = t + float(rng.uniform(0.05, 0.3))
            items.append(("request", rec(rid, t, t, first, first + 0.4, chunks=[first + 0.2, first + 0.4])))
            rid += 1
        if sec == 20:
            items.append(("event", Event(t=20.5, kind="mark", message="here")))
    return items


def feed(builder, items, snapshot_every=0):
    for n, (kind, item) in enumerate(items):
        getattr(builder, f"on_{kind}")(item)
        if snapshot_every and n % snapshot_every == 0:
            builder.snapshot()
            builder.take_completed_seconds()
    builder.on_finish(30.0)


@pytest.mark.slow
def test_replay_equals_live_whatever_the_snapshot_calls():
    live, replay = SeriesBuilder(), SeriesBuilder()
    feed(live, stream(), snapshot_every=7)  # the UI asking for snapshots changes nothing
    feed(replay, stream())
    a, b = live.snapshot(), replay.snapshot()
    assert a.times == b.times and a.events == b.events
    for name in SERIES_NAMES:
        assert same(a.series[name], b.series[name]), name
    assert a.summary == b.summary


def test_completed_seconds_are_handed_out_once():
    b = SeriesBuilder(grace_s=2.0)
    feed(b, stream(seconds=10))
    got = b.take_completed_seconds()
    assert [t for t, _ in got] == [float(i) for i in range(len(got))]
    assert got and set(got[0][1]) == set(SERIES_NAMES)
    assert b.take_completed_seconds() == []


def test_completed_seconds_hold_the_series_values_while_seconds_are_still_filling():
    """The knee's values of a frozen second are the series' own there, though the
    seconds not frozen yet are left out of what they are read from."""
    b = SeriesBuilder(grace_s=2.0)
    items = stream(seconds=20)
    for kind, item in items[: len(items) * 3 // 4]:  # mid-run: seconds still filling
        getattr(b, f"on_{kind}")(item)
    got = b.take_completed_seconds()
    _, arrays = b.series()
    assert got and len(arrays["ttft_p50"]) > len(got)  # newer seconds than the frozen ones
    for t, values in got:
        for name in SERIES_NAMES:
            value, whole = values[name], float(arrays[name][int(t)])
            assert value == whole or (math.isnan(value) and math.isnan(whole)), (t, name)  # exactly
    assert any(not math.isnan(values["ttft_p99"]) for _, values in got)


@pytest.mark.slow
def test_an_hour_long_run_keeps_every_second():
    """The snapshot of 1 h of per-second data holds every second's values, not a window or
    a downsample. (Its cost is bench/bench_live_costs.py's business.)"""
    b = SeriesBuilder()
    rid = 0
    for sec in range(3600):
        b.on_tick(Tick(t=float(sec), target_rps=10.0, state="holding", in_flight=5))
        b.on_scrape(scrape(sec + 0.05, "a", 100.0 * sec))
        if sec % 10 == 0:  # a sparse request stream keeps the test fast
            b.on_request(rec(rid, sec, sec, sec + 0.1, sec + 0.5, chunks=[sec + 0.3, sec + 0.5]))
            rid += 1
    snap = b.snapshot()
    assert snap.times == [float(sec) for sec in range(3599)]  # the second in progress is not shown yet
    s = snap.series
    assert s["target_rps"] == [10.0] * 3599 and s["in_flight"] == [5.0] * 3599
    one_every_ten = [1.0 if sec % 10 == 0 else 0.0 for sec in range(3599)]
    assert s["sent_rps"] == one_every_ten and s["completed_rps"] == one_every_ten
    assert s["client_output_tps"] == [4.0 * n for n in one_every_ten]
    assert same(s["server_generation_tps"], [100.0] * 3599)
    assert snap.summary["completed"] == 360


def test_errors_per_second_by_class_and_cancelled_in_none():
    b = SeriesBuilder()
    b.on_request(rec(0, 0.1, 0.1, None, 0.5, error="http_503"))
    b.on_request(rec(1, 0.2, 0.2, None, 0.6, error="http_429"))
    b.on_request(rec(2, 0.3, 0.3, None, 1.2, error="connect"))
    b.on_request(rec(3, 0.4, 0.4, 0.5, 1.3, error="stream_aborted"))
    b.on_request(rec(4, 0.5, 0.5, None, 1.4, error="timeout"))
    b.on_request(rec(5, 0.6, 0.6, 0.7, 2.1, error="stream_error"))
    b.on_request(rec(6, 0.7, 0.7, 0.8, 2.2, error="client_error"))
    b.on_request(rec(7, 0.8, 0.8, 0.9, 2.3, error="cancelled"))
    b.on_finish(3.0)
    s = b.snapshot().series
    assert s["errors_http_rps"] == [2.0, 0.0, 0.0]
    assert s["errors_connection_rps"] == [0.0, 2.0, 0.0]  # refused, and a stream broken off
    assert s["errors_timeout_rps"] == [0.0, 1.0, 0.0]
    assert s["errors_protocol_rps"] == [0.0, 0.0, 2.0]
    assert s["error_rps"] == [2.0, 3.0, 2.0]  # every failure; a request the run cancelled is not one


def test_client_queued_from_ticks():
    b = SeriesBuilder()
    b.on_tick(Tick(t=1.0, target_rps=4.0, state="ramping", in_flight=4, client_queued=0))
    b.on_tick(Tick(t=2.0, target_rps=4.0, state="ramping", in_flight=4, client_queued=7))
    b.on_finish(2.5)
    assert same(b.snapshot().series["client_queued"], [NAN, 0.0, 7.0])


def test_scrape_failures_counted_per_distinct_reason_and_the_last_good_one_kept():
    b = SeriesBuilder()
    b.on_scrape(scrape(0.5, "a", 0))
    for t in (1.5, 2.5, 3.5):
        b.on_scrape(ServerSample(t=t, url="a", ok=False, error="connection refused"))
    b.on_scrape(ServerSample(t=4.5, url="a", ok=False, error="timeout after 2 s"))
    b.on_scrape(ServerSample(t=5.5, url="a", ok=False, error="connection refused"))
    snap = b.snapshot()
    assert snap.last_good_scrape_t == 0.5
    lines = [(e.message, e.count, e.first_t, e.last_t) for e in snap.scrape_errors]
    # newest last: the refused line moved after the timeout when it came back
    assert lines == [("timeout after 2 s", 1, 4.5, 4.5), ("connection refused", 4, 1.5, 5.5)]
    b.on_scrape(scrape(6.5, "a", 10))
    assert b.snapshot().last_good_scrape_t == 6.5


def test_counters_are_not_spread_over_an_outage():
    b = SeriesBuilder()
    b.on_scrape(scrape(0.5, "a", 0))
    b.on_scrape(scrape(1.5, "a", 100))
    b.on_scrape(scrape(9.5, "a", 900))  # 8 s unseen: more than 3 scrape intervals
    b.on_scrape(scrape(10.5, "a", 1000))
    b.on_finish(11.0)
    s = b.snapshot().series["server_generation_tps"]
    assert same(s[:2], [100.0, 100.0]) and all(math.isnan(v) for v in s[2:9])
    assert same(s[9:], [100.0, 100.0])


def test_checkpoints_from_before_the_error_classes_still_restore():
    b = SeriesBuilder()
    b.on_request(rec(0, 0.1, 0.1, None, 0.5, error="http_503"))
    b.on_scrape(ServerSample(t=1.2, url="a", ok=False, error="connection refused"))
    b.on_tick(Tick(t=2.0, target_rps=1.0, state="ramping", in_flight=0, client_queued=2))
    meta, arrays = b.export_state()
    # What a builder without them wrote: no per-class counts, no client queue, no scrape state.
    meta["counts"] = [c for c in meta["counts"] if not c[0].startswith("errors_")]
    meta["last"] = [c for c in meta["last"] if c[0] != "client_queued"]
    del meta["last_good_scrape_t"], meta["scrape_errors"]
    old = {k: v for k, v in arrays.items() if not k.startswith(("counts.errors_", "last.client_queued"))}
    restored = read_checkpoint(None, meta, old)  # the upgrade fills the parts in
    restored.on_request(rec(1, 2.1, 2.1, None, 2.5, error="http_500"))
    restored.on_finish(3.0)
    s = restored.snapshot().series
    # Before the checkpoint: unknown (a gap), not zero; after it: counted.
    assert same(s["errors_http_rps"], [NAN, NAN, 1.0])
    assert same(s["error_rps"], [1.0, 0.0, 1.0])
    assert all(math.isnan(v) for v in s["client_queued"])
    assert restored.snapshot().scrape_errors == [] and restored.snapshot().last_good_scrape_t is None


def test_checkpoints_keep_the_scrape_failures():
    b = SeriesBuilder()
    b.on_scrape(scrape(0.5, "a", 0))
    b.on_scrape(ServerSample(t=1.5, url="a", ok=False, error="connection refused"))
    restored = SeriesBuilder.from_state(None, *b.export_state())
    restored.on_scrape(ServerSample(t=2.5, url="a", ok=False, error="connection refused"))
    snap = restored.snapshot()
    assert snap.last_good_scrape_t == 0.5
    assert [(e.count, e.first_t, e.last_t) for e in snap.scrape_errors] == [(2, 1.5, 2.5)]


def test_a_replica_gone_stale_drops_out_of_the_summed_gauges():
    b = SeriesBuilder()
    b.on_scrape(scrape(0.5, "a", 0, running=2.0))
    b.on_scrape(scrape(0.5, "b", 0, running=3.0))
    for t in (1.5, 2.5, 3.5, 4.5, 5.5):
        b.on_scrape(scrape(t, "a", 10 * t, running=2.0))
        b.on_scrape(ServerSample(t=t, url="b", ok=False, error="connection refused"))
    b.on_finish(6.0)
    # b's 3 running count while its last scrape is at most 3 s old, then no longer
    assert same(b.snapshot().series["running"], [5.0, 5.0, 5.0, 5.0, 2.0, 2.0])


def many_chunk_stream(seed=3, seconds=12):
    """Requests of up to 300 chunks, some failed, some reaching the builder 4 s after they
    ended (after their second's latency values were frozen)."""
    rng = np.random.default_rng(seed)
    items, delayed, rid = [], [], 0
    for sec in range(seconds + 4):
        items.append(("tick", Tick(t=float(sec), target_rps=20.0, state="holding", in_flight=20)))
        items += [("request", r) for due, r in delayed if due == sec]
        for _ in range(int(rng.integers(5, 40)) if sec < seconds else 0):
            sent = max(0.0, sec - float(rng.uniform(0, 1.5)))
            first = sent + float(rng.uniform(0.01, 0.2))
            chunks = (first + np.cumsum(rng.uniform(0.001, 0.01, int(rng.integers(0, 300))))).tolist()
            end = max(chunks[-1] if chunks else first, sec + float(rng.random()))
            if rid % 11 == 0:
                record = rec(rid, sent, sent, None, end, error="http_500")
            else:
                record = rec(rid, sent, sent, first, end, tokens=len(chunks) + 1, chunks=chunks)
            if rid % 29 == 0:
                delayed.append((sec + 4, record))
            else:
                items.append(("request", record))
            rid += 1
    return items


@pytest.mark.slow
def test_records_folded_in_batches_give_the_figures_of_records_folded_on_arrival():
    items = many_chunk_stream()
    on_arrival, batched = SeriesBuilder(slo={"ttft": 100}), SeriesBuilder(slo={"ttft": 100})
    for kind, item in items:
        getattr(on_arrival, f"on_{kind}")(item)
        on_arrival.snapshot()  # a read folds the queue: one record at a time
        getattr(batched, f"on_{kind}")(item)
    for b in (on_arrival, batched):
        b.on_finish(16.5)
    a, b = on_arrival.snapshot(), batched.snapshot()
    assert a.times == b.times
    for name in SERIES_NAMES:
        np.testing.assert_array_equal(np.array(a.series[name]), np.array(b.series[name]), err_msg=name)
    assert a.summary == b.summary  # exactly, means and stds included
    assert a.summary["completed"] + a.summary["failed"] == sum(1 for kind, _ in items if kind == "request")


def test_the_queue_of_records_is_bounded_without_any_read():
    b = SeriesBuilder()
    for i in range(3 * FOLD_AT_QUEUED):
        b.on_request(rec(i, 0.1, 0.1, 0.2, 0.5))  # all in second 0: no freeze ever folds them
        assert len(b._queued) < FOLD_AT_QUEUED
    assert b.snapshot(now=1.0).summary["completed"] == 3 * FOLD_AT_QUEUED
