"""The client's self-check: the loop-lag probe, the GC policy of the load phase, and what
a run reports of both (summary, warning, result JSON, recording)."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time

import pytest

from rampwatch.core.figures.client_lag import (
    MAX_LAG_BUCKET,
    ClientCounts,
    ClientFigures,
    ClientTotals,
    LagHistogram,
    bucket_ms,
    lag_bucket,
)
from rampwatch.core.figures.summary import client_lag_warning, format_summary, summarise_requests, to_bench_result
from rampwatch.core.timeline import NullSink, RequestRecord
from rampwatch.loadgen.run.loop_health import GC_ENV, ClientHealth, LoadPhaseGC, LoopLagProbe
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve

INSTANT = SimConfig(hardware="instant", model="tiny")


@pytest.mark.parametrize("lag_ms", [0.011, 0.05, 0.3, 1.0, 4.2, 17.0, 250.0, 9000.0])
def test_a_lag_reads_back_within_five_percent_of_itself(lag_ms):
    assert bucket_ms(lag_bucket(lag_ms)) == pytest.approx(lag_ms, rel=0.05)


def test_lags_under_the_base_read_as_zero():
    assert lag_bucket(0.0) == 0 and bucket_ms(0) == 0.0


@pytest.mark.parametrize(
    ("q", "expected"),
    [(50, 0.1), (99, 0.1), (99.5, 100.0), (100, 100.0)],
)
def test_histogram_percentiles_follow_the_samples(q, expected):
    h = LagHistogram()
    for _ in range(990):
        h.add(0.1)
    for _ in range(10):
        h.add(100.0)
    assert h.n == 1000
    assert h.percentile_ms(q) == pytest.approx(expected, rel=0.05)
    assert h.max_ms == 100.0


def test_histograms_merge_as_their_samples_would():
    a, b, both = LagHistogram(), LagHistogram(), LagHistogram()
    for i, v in enumerate([0.2, 3.0, 0.5, 40.0, 7.0, 0.01, 2.5]):
        (a if i % 2 else b).add(v)
        both.add(v)
    a.merge(b.pairs(), b.max_ms)
    assert a.counts == both.counts and a.max_ms == both.max_ms


def test_an_empty_histogram_has_no_percentile():
    assert LagHistogram().percentile_ms(99) is None


async def test_the_probe_sees_a_stall_once_per_interval_it_covered():
    probe = LoopLagProbe(interval_s=0.005)
    probe.start()
    try:
        await asyncio.sleep(0.02)
        probe.take()  # the start's samples
        time.sleep(0.1)  # noqa: ASYNC251 - the loop held for 100 ms, on purpose
        await asyncio.sleep(0.01)
        window = probe.take()
    finally:
        probe.stop()
    assert window.max_ms >= 95.0
    # The grid points the stall covered are each a sample, ~100, 95, 90, … ms late: the
    # stall weighs by its length, not as one sample.
    over_20 = sum(c for b, c in window.counts.items() if bucket_ms(b) > 20.0)
    assert over_20 >= 14


def _long_lived_containers(n: int) -> list[list[int]]:
    """Objects that survive the young collections, as the state of thousands of streams does."""
    return [[i] for i in range(n)]


class _Collections:
    """Full collections seen, with the thread that ran them."""

    def __init__(self) -> None:
        self.full: list[int] = []

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            self.full.append(threading.get_ident())

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def test_the_same_allocations_trigger_a_full_collection_without_the_policy():
    # The control of the tests below: what they allocate is enough for Python's own policy
    # to walk the whole heap.
    gc.collect()
    kept = []
    with _Collections() as seen:
        for _ in range(40):
            kept.append(_long_lived_containers(20_000))
            if seen.full:
                break
    assert seen.full, "800,000 long-lived objects never triggered a full collection"


def test_the_policy_keeps_full_collections_away_and_counts_the_young_ones():
    before = gc.get_threshold()
    policy = LoadPhaseGC()
    kept = []
    policy.start()  # its one full collection, before the load
    try:
        with _Collections() as seen:
            for _ in range(40):
                kept.append(_long_lived_containers(20_000))
    finally:
        policy.stop()
    assert seen.full == []
    young, middle, full = policy.counts.collections
    assert young > 0 and full == 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_overlapping_policies_restore_the_thresholds_once_both_end():
    before = gc.get_threshold()
    a, b = LoadPhaseGC(), LoadPhaseGC()
    a.start()
    b.start()
    a.stop()
    assert gc.get_threshold()[2] > before[2]  # b's load still runs
    b.stop()
    assert gc.get_threshold() == before


def test_the_growth_valve_runs_one_full_collection_and_says_how_long_it_took():
    resident = [100 << 20]
    policy = LoadPhaseGC(growth_bytes=64 << 20, rss=lambda: resident[0])
    policy.start()
    try:
        resident[0] += 63 << 20
        assert policy.check_growth() is None  # under the bound: no pause
        resident[0] += 2 << 20
        pause = policy.check_growth()
        assert policy.check_growth() is None  # the bound starts again from here
    finally:
        policy.stop()
    assert pause is not None and pause >= 0.0
    assert policy.counts.collections[2] == 1


def scenario(rate: float, duration_s: float):
    sets = [("schedule.kind", "constant"), ("schedule.rate", str(rate)), ("schedule.duration_s", str(duration_s))]
    sets += [("workload.input_tokens", "32"), ("workload.output_tokens", "16")]
    return load_scenario("random", overrides=[("schedule", "{}"), *sets])


class _PhaseSink(NullSink):
    """Marks the load phase (the header to the finish) and does, per record, what the test
    asks of it on the run's loop."""

    def __init__(self, on_record) -> None:
        self.on_record = on_record
        self.loading = False
        self.ticks = []

    def on_start(self, header) -> None:
        self.loading = True

    def on_request(self, record) -> None:
        self.on_record(record)

    def on_tick(self, tick) -> None:
        self.ticks.append(tick)

    def on_finish(self, t) -> None:
        self.loading = False


@pytest.mark.slow
async def test_no_full_collection_runs_on_the_sending_loop_during_the_load():
    kept: list = []
    sink = _PhaseSink(lambda record: kept.append(_long_lived_containers(8_000)))
    loop_thread = threading.get_ident()
    during_load: list[int] = []

    def watch(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2 and sink.loading:
            during_load.append(threading.get_ident())

    gc.callbacks.append(watch)
    try:
        async with serve(INSTANT) as url:
            run = Run(
                scenario(100, 1.0),
                RunOptions(target=url, model="tiny", tick_interval_s=0.25, scrape_interval_s=0.25),
                sinks=[sink],
            )
            result = await run.execute()
    finally:
        gc.callbacks.remove(watch)
    assert len(kept) >= 90  # ~800,000 long-lived objects made on the loop during the load
    assert loop_thread not in during_load and during_load == []
    client = result.live_summary.client
    assert client is not None
    assert client.gc_collections[0] > 0 and client.gc_collections[2] == 0


@pytest.mark.slow
async def test_a_run_whose_loop_stalled_reports_the_stall_and_warns():
    stalled = []

    def stall_once(record) -> None:
        if not stalled:
            stalled.append(record.id)
            time.sleep(0.3)  # a blocked loop: every send and read waits

    sink = _PhaseSink(stall_once)
    async with serve(INSTANT) as url:
        run = Run(
            scenario(20, 1.0),
            RunOptions(target=url, model="tiny", tick_interval_s=0.25, scrape_interval_s=0.25, keep_records=True),
            sinks=[sink],
        )
        result = await run.execute()
    summary = result.live_summary
    client = summary.client
    assert client is not None and client.lag_max_ms >= 280.0
    # The ticks carry the same: the recording's read-back folds them into the same figures.
    assert ClientTotals.restore_state(None).figures() is None
    folded = ClientTotals()
    for tick in sink.ticks:
        folded.add(tick.loop_lag, tick.loop_lag_max_ms, tick.client_counts)
    assert folded.figures() == client
    warning = client_lag_warning(summary)
    assert warning is not None and f"max {client.lag_max_ms:.0f} ms" in warning
    text = format_summary(summary)
    assert "Client loop lag max (ms):" in text and text.splitlines()[-1] == warning
    result_json = to_bench_result(summary, result.header, result.requests)
    assert result_json["rampwatch_client"]["loop_lag_max_ms"] == client.lag_max_ms


def _itl_run(itl_ms: float, ttft_ms: float, client: ClientFigures | None):
    """A summary of 20 requests with the given TTFT and ITL, and the client's figures."""
    records = []
    for i in range(20):
        sent = float(i)
        first = sent + ttft_ms / 1000
        chunks = [first + k * itl_ms / 1000 for k in range(1, 6)]
        records.append(
            RequestRecord(
                id=i,
                scheduled_at=sent,
                sent_at=sent,
                end_at=chunks[-1],
                first_token_at=first,
                chunk_times=chunks,
                completion_tokens=6,
                prompt_tokens=10,
            )
        )
    return summarise_requests(None, records, [], [], client=client)


def _client(p99_ms: float, max_ms: float, full: int = 0) -> ClientFigures:
    return ClientFigures(0.1, p99_ms, max_ms, 1000, (40, 3, full), 1.0)


@pytest.mark.parametrize(
    ("itl_ms", "ttft_ms", "lag_p99_ms", "warns"),
    [
        (30.0, 200.0, 0.8, False),  # under the 1 ms floor
        (30.0, 200.0, 1.4, False),  # under 5 % of the 30 ms ITL p99
        (30.0, 200.0, 2.0, True),  # over it: the ITL p99 may hold 2 ms of the client
        (5.0, 200.0, 1.2, True),  # a 5 ms ITL: the floor binds
        (300.0, 2000.0, 12.0, False),  # slow answers: 12 ms is under 5 % of 300 ms
    ],
)
def test_the_warning_follows_the_p99s_the_client_reports(itl_ms, ttft_ms, lag_p99_ms, warns):
    summary = _itl_run(itl_ms, ttft_ms, _client(lag_p99_ms, 40.0))
    warning = client_lag_warning(summary)
    assert (warning is not None) is warns
    lines = format_summary(summary).splitlines()
    if warns:
        assert lines[-1] == warning and f"loop lag p99 {lag_p99_ms:.1f} ms" in warning
        assert f"ITL p99 {itl_ms:.1f} ms" in warning and "TTFT" not in warning  # only the p99 it could move
    else:
        assert lines[-1] == "=" * 50


def test_the_warning_names_full_collections_and_none_without_a_self_check():
    assert "2 full GC passes during the load" in (
        client_lag_warning(_itl_run(5.0, 50.0, _client(30.0, 200.0, 2))) or ""
    )
    assert client_lag_warning(_itl_run(5.0, 50.0, None)) is None


def test_gc_counts_add_up_across_processes():
    a = ClientCounts([3, 1, 0], 0.5, 1.0)
    a.merge(ClientCounts([2, 0, 1], 40.0, 40.0))
    assert a.collections == [5, 1, 1] and a.max_pause_ms == 40.0 and a.total_pause_ms == 41.0
    assert ClientCounts.from_dict(a.to_dict()) == a


def test_pythons_own_policy_can_be_kept_and_its_full_collections_are_counted(monkeypatch):
    monkeypatch.setenv(GC_ENV, "python")
    before = gc.get_threshold()
    policy = LoadPhaseGC()
    policy.start()
    kept = []
    try:
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
        for _ in range(40):
            kept.append(_long_lived_containers(20_000))
            if policy.counts.collections[2]:
                break
    finally:
        policy.stop()
    assert policy.counts.collections[2] >= 1 and policy.counts.max_pause_ms > 0.0
    assert gc.get_threshold() == before


@pytest.mark.slow
async def test_a_requests_client_state_forms_no_reference_cycles():
    # What the load leaves to the collector: with full collections off while it runs, a
    # cycle that outlived the young generations would stay until the load ends.
    async with serve(INSTANT) as url:
        run = Run(scenario(100, 1.0), RunOptions(target=url, model="tiny"), sinks=[NullSink()])
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            result = await run.execute()
            gc.collect()
            cyclic = {type(o).__module__ + "." + type(o).__qualname__ for o in gc.garbage}
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert result.counts.ended >= 90
    clients = {name for name in cyclic if name.startswith(("rampwatch.loadgen", "rampwatch.core", "aiohttp.client"))}
    assert clients == set()


@pytest.mark.parametrize(
    ("loop_lag", "max_ms", "counts"),
    [
        ([[10_000, 5]], 5.0, {"collections": [1, 0, 0]}),  # a bucket past a day's lag
        ([[1e9, 1]], "x", "junk"),
        ([["abc", 3]], float("nan"), [1, 2, 3]),
        ([[1, 2, 3]], float("inf"), {"collections": [1]}),
        ({"a": 1}, -4.0, {"collections": ["a", 0, 0], "max_pause_ms": "zz", "cpu_ms": float("nan")}),
        (5, None, {"collections": [-3, 0, 0], "gc_policy": "\x1b[2J"}),
        ([[3, -328]], 5.0, None),
        ([[True, 1]], 5.0, {"collections": [True, 0, 0]}),
    ],
)
def test_a_damaged_ticks_self_check_is_read_past_not_folded(loop_lag, max_ms, counts):
    totals = ClientTotals()
    totals.add([[40, 10]], 0.6, {"collections": [4, 0, 0], "max_pause_ms": 0.5, "gc_policy": "load"})
    totals.add(loop_lag, max_ms, counts)
    figures = totals.figures()
    assert figures is not None
    assert figures.lag_samples == 10 and figures.lag_max_ms == 0.6  # the damaged window added nothing
    assert all(c >= 0 for c in figures.gc_collections) and figures.gc_policy in ("load", "python")
    assert figures.gc_max_pause_ms >= 0.0 and figures.cpu_wait_pct is None
    assert json.loads(json.dumps(figures.to_dict(), allow_nan=False))  # valid JSON, no NaN or Infinity


def test_lag_buckets_stop_at_a_days_lag():
    assert lag_bucket(1e12) == MAX_LAG_BUCKET and bucket_ms(10**9) == bucket_ms(MAX_LAG_BUCKET)
    assert bucket_ms(MAX_LAG_BUCKET) == pytest.approx(86_400_000, rel=0.05)


def test_a_runs_self_check_is_its_stream_readers_own_or_its_workers():
    health = ClientHealth()
    health.probe._window.add(250.0)  # a run without workers reads the streams on its own loop
    alone = health.take()
    assert alone.lag.max_ms == 250.0 and alone.counts.gc_policy in ("load", "python")
    health = ClientHealth(reads_streams=False)  # a controller: its workers read the streams
    health.probe._window.add(250.0)
    health.merge_worker(0, [[lag_bucket(2.0), 40]], 2.0, ClientCounts([3, 0, 0], 0.2, 0.4, 100.0, 5.0))
    health.merge_worker(1, [[lag_bucket(3.0), 40]], 3.0, ClientCounts([2, 1, 0], 0.3, 0.5, 50.0, 45.0))
    window = health.take()
    assert window.lag.n == 80 and window.lag.max_ms == 3.0  # the workers' alone
    assert window.counts.collections == [5, 1, 0] and window.counts.cpu_wait_pct == pytest.approx(25.0)


def test_a_process_counts_its_loop_threads_cpu_and_its_wait_for_one():
    health = ClientHealth()
    health._sched_at_start = (0.0, 0.0)  # from the thread's start
    counts = health.own_counts()
    assert counts.cpu_ms is not None and counts.cpu_ms > 0 and counts.cpu_wait_ms is not None
    assert 0.0 <= counts.cpu_wait_pct <= 100.0


def test_no_warning_without_a_ttft_or_an_itl():
    summary = _itl_run(30.0, 200.0, _client(40.0, 80.0))
    nothing = summarise_requests(None, [], [], [], client=summary.client)
    assert nothing.completed == 0 and client_lag_warning(nothing) is None


@pytest.mark.parametrize(
    ("cpu_wait_pct", "full", "cause"),
    [
        (45.0, 0, "it waited for a CPU 45 % of its busy time: this machine is short of cores"),
        (45.0, 2, "it waited for a CPU 45 % of its busy time: this machine is short of cores"),
        (5.0, 2, "2 full GC passes during the load"),
        (5.0, 0, "its own work held the loop"),
        (None, 0, "its own work held the loop"),
    ],
)
def test_the_warning_names_the_likely_cause(cpu_wait_pct, full, cause):
    client = ClientFigures(0.1, 42.0, 90.0, 1000, (40, 3, full), 1.0, cpu_wait_pct)
    warning = client_lag_warning(_itl_run(3.7, 140.0, client)) or ""
    assert f"; {cause}): " in warning
    # a p99 under the lag is all the client's as far as the run can tell; the other one may hold some
    assert warning.endswith(
        ": TTFT p99 140.0 ms and ITL p99 3.7 ms (all of it, as far as this run can tell) may hold up to "
        "42.0 ms of the client's own delay; see docs/scale.md"
    )


@pytest.mark.slow
def test_every_take_lets_the_growth_valve_run_and_says_its_pause():
    resident = [100 << 20]
    for reads_streams in (True, False):  # the run's own loop, or a controller over workers
        health = ClientHealth(
            gc_policy=LoadPhaseGC(growth_bytes=64 << 20, rss=lambda: resident[0]), reads_streams=reads_streams
        )
        health.gc_policy.start()
        try:
            assert health.take().full_gc_pause_ms is None
            resident[0] += 65 << 20
            window = health.take()
        finally:
            health.gc_policy.stop()
        assert window.full_gc_pause_ms is not None and health.gc_policy.counts.collections[2] == 1
