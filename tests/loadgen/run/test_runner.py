"""The run engine against the in-process simulator: sends, concurrency cap, steering,
stop and drain, unreachable targets, faults."""

from __future__ import annotations

import asyncio
import dataclasses
import socket

import pytest

from rampwatch.app.session import progress_line
from rampwatch.core.errors import TargetUnreachable
from rampwatch.core.timeline import NullSink, ServerSample
from rampwatch.loadgen.run.drain import DrainPolicy
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.requests_ahead import PROBE_REQUESTS, RequestsAhead
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.sim.config import FaultConfig, SimConfig
from rampwatch.sim.server import serve


class ListSink(NullSink):
    def __init__(self) -> None:
        self.items: list[tuple[str, object]] = []

    def on_start(self, header):
        self.items.append(("start", header))

    def on_request(self, record):
        self.items.append(("request", record))

    def on_scrape(self, sample):
        self.items.append(("scrape", sample))

    def on_tick(self, tick):
        self.items.append(("tick", tick))

    def on_event(self, event):
        self.items.append(("event", event))

    def on_finish(self, t):
        self.items.append(("finish", t))

    def of(self, kind: str) -> list:
        return [item for k, item in self.items if k == kind]


class SentSink(ListSink):
    """Sets ``reached`` at the first tick that counts ``n`` requests sent."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.reached = asyncio.Event()

    def on_tick(self, tick):
        super().on_tick(tick)
        if (tick.sent_total or 0) >= self.n:
            self.reached.set()


class StartedSink(ListSink):
    """Sets ``started`` at the run's t = 0 (its header): steering timed from there, not
    from the call, whose start-up takes longer on a loaded machine."""

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    def on_start(self, header):
        super().on_start(header)
        self.started.set()


def scenario(schedule: dict, output_tokens: int = 16, input_tokens: int = 32, max_concurrency: int | None = None):
    sets = [(f"schedule.{k}", str(v)) for k, v in schedule.items()]
    sets += [("workload.input_tokens", str(input_tokens)), ("workload.output_tokens", str(output_tokens))]
    flags = {"max_concurrency": max_concurrency} if max_concurrency else {}
    return load_scenario("random", overrides=[("schedule", "{}"), *sets], flags=flags)


def make_run(url: str, scn, sink: ListSink, **options) -> Run:
    options.setdefault("scrape_interval_s", 0.25)
    options.setdefault("tick_interval_s", 0.25)
    return Run(scn, RunOptions(target=url, model="tiny", keep_records=True, **options), sinks=[sink])


INSTANT = SimConfig(hardware="instant", model="tiny")


def sends_between(records, t0: float, t1: float) -> int:
    return sum(1 for r in records if t0 <= r.sent_at < t1)


@pytest.mark.slow
@pytest.mark.timing
async def test_constant_rate_run_publishes_the_whole_stream():
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 20, "duration_s": 1.5}), sink)
        result = await run.execute()

    assert sink.items[0][0] == "start" and sink.items[-1][0] == "finish"
    records = sink.of("request")
    # The result keeps chunk times packed (array('d')); same values as published.
    assert records == [dataclasses.replace(r, chunk_times=list(r.chunk_times)) for r in result.requests]
    assert 28 <= len(records) <= 31  # 20/s for 1.5 s, deterministic gaps
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    assert all(r.completion_tokens == 16 for r in records)
    assert sorted(r.id for r in records) == list(range(len(records)))
    gaps = sorted(
        b.scheduled_at - a.scheduled_at
        for a, b in zip(
            sorted(records, key=lambda r: r.scheduled_at), sorted(records, key=lambda r: r.scheduled_at)[1:]
        )
    )
    assert gaps[len(gaps) // 2] == pytest.approx(0.05, abs=1e-6)
    lateness = sorted(r.sent_at - r.scheduled_at for r in records)
    assert lateness[0] >= 0
    assert lateness[len(lateness) // 2] < 0.05  # loose sanity bound, not a speed target
    ticks = sink.of("tick")
    assert ticks[-1].state == "done"
    assert ticks[-1].offered_total == ticks[-1].sent_total == len(records)
    assert [t.offered_total for t in ticks] == sorted(t.offered_total for t in ticks)
    assert any(s.ok and s.backend == "vllm" for s in sink.of("scrape"))
    kinds = [e.kind for e in sink.of("event")]
    assert kinds[0] == "start" and kinds[-1] == "stop"
    assert not result.interrupted and result.error_rate == 0.0


@pytest.mark.slow
@pytest.mark.timing
async def test_max_concurrency_caps_in_flight_and_the_wait_is_client_queue_time():
    # Each request takes a few hundred ms on the simulated L4; 12 arrive at once-ish.
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny", speed=4.0)
    sink = ListSink()
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 40, "duration_s": 0.3}, output_tokens=24, max_concurrency=2),
            sink,
        )
        result = await run.execute()

    records = result.requests
    assert len(records) == 12 and all(r.ok for r in records)
    # in flight = [sent_at, end_at) overlaps, from the records themselves
    edges = sorted([(r.sent_at, 1) for r in records] + [(r.end_at, -1) for r in records])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    assert peak == 2
    assert max(t.in_flight for t in sink.of("tick")) <= 2
    assert max(t.client_queued for t in sink.of("tick")) >= 5
    running = [s.running for s in sink.of("scrape") if s.ok and s.running is not None]
    assert running and max(running) <= 2
    queued = [r for r in records if r.client_queue_s > 0.3]
    assert len(queued) >= 6
    # the wait is not in TTFT: TTFT stays near the unqueued requests' TTFT
    first_ttft = max(r.ttft for r in records[:2])
    for r in queued:
        assert r.ttft < r.client_queue_s
        assert r.ttft < first_ttft + 0.2


@pytest.mark.slow
@pytest.mark.timing
async def test_steering_changes_the_sends_and_every_call_is_an_event():
    sink = StartedSink()
    async with serve(INSTANT) as url:
        # a steep ramp: 10 -> 70 req/s over 6 s, deterministic gaps
        run = make_run(
            url,
            scenario({"kind": "linear", "start_rps": 10, "end_rps": 70, "duration_s": 6, "arrival": "constant"}),
            sink,
        )

        async def steer() -> dict[str, float]:
            at = {}
            await sink.started.wait()
            await asyncio.sleep(1.0)
            run.hold()
            at["hold"] = run.now()
            await asyncio.sleep(1.2)
            run.set_rate(5)
            at["set_rate"] = run.now()
            await asyncio.sleep(1.0)
            run.step_rate(10)
            at["step_rate"] = run.now()
            await asyncio.sleep(1.0)
            run.set_rate(0)
            at["zero"] = run.now()
            await asyncio.sleep(0.6)
            run.mark("before resume")
            run.resume()
            at["resume"] = run.now()
            await asyncio.sleep(0.6)
            run.stop()
            at["stop"] = run.now()
            return at

        steering = asyncio.create_task(steer())
        result = await run.execute()
        at = await steering

    records = result.requests
    held_rate = next(e for e in sink.of("event") if e.kind == "hold").data["after_rps"]
    assert 17 <= held_rate <= 23  # ~20 req/s one second into the ramp
    # holding freezes the rate: the same count in each half of the hold
    first = sends_between(records, at["hold"] + 0.1, at["hold"] + 0.6)
    second = sends_between(records, at["hold"] + 0.6, at["hold"] + 1.1)
    assert abs(first - second) <= 1
    assert abs(first - held_rate * 0.5) <= 2
    assert abs(sends_between(records, at["set_rate"] + 0.1, at["set_rate"] + 0.9) - 5 * 0.8) <= 1
    assert abs(sends_between(records, at["step_rate"] + 0.1, at["step_rate"] + 0.9) - 15 * 0.8) <= 2
    assert sends_between(records, at["zero"] + 0.05, at["resume"]) == 0
    # resumed ramp continues from ~20 req/s, not from where the clock would have it
    assert 4 <= sends_between(records, at["resume"] + 0.05, at["stop"]) <= 20
    assert not any(r.sent_at > at["stop"] + 0.01 for r in records)

    events = [e for e in sink.of("event") if e.kind not in ("start", "scrape_error", "info", "knee")]
    assert [e.kind for e in events] == ["hold", "set_rate", "set_rate", "set_rate", "mark", "resume", "stop", "stop"]
    assert events[2].data["delta_rps"] == 10 and events[2].data["after_rps"] == pytest.approx(15)
    assert events[4].data["note"] == "before resume"
    for name, event in zip(["hold", "set_rate", "step_rate", "zero"], events):
        assert event.t == pytest.approx(at[name], abs=0.05)
    ticks = sink.of("tick")
    assert any(t.state == "holding" and t.target_rps == pytest.approx(5) for t in ticks)
    assert ticks[-1].state == "done"


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.parametrize(
    "drain",
    # a stop that cuts the schedule short gives its grace whatever the policy for the
    # schedule's end says: cancel (none at all) or a cap shorter than the grace
    [DrainPolicy(), DrainPolicy("cancel"), DrainPolicy("cap", 0.1)],
)
async def test_stop_cancels_in_flight_after_the_grace_period(drain):
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")  # ~30 ms per decode step
    sink = SentSink(10)
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 10, "duration_s": 30}, output_tokens=2000),
            sink,
            stop_grace_s=0.4,
            drain=drain,
        )

        async def stop_soon() -> float:
            # Ten requests sent (1 s of the run's clock, whatever its start-up took), then stop.
            await sink.reached.wait()
            run.interrupt()
            return run.now()

        stopper = asyncio.create_task(stop_soon())
        result = await run.execute()
        stopped_at = await stopper

    assert result.interrupted
    assert stopped_at + 0.4 <= result.duration_s < stopped_at + 1.5
    assert all(r.sent_at <= stopped_at for r in result.requests)
    cancelled = [r for r in result.requests if r.error_class == "cancelled"]
    assert len(cancelled) == len(result.requests) >= 10
    assert all(r.first_token_at is not None for r in cancelled[:-2])
    assert result.error_rate == 0.0  # stopped by the user, not failed by the server
    cancels = [e for e in sink.of("event") if e.kind == "cancel"]
    assert len(cancels) == 1 and "grace period" in cancels[0].message
    assert cancels[0].data["requests"] == len(cancelled)
    assert sink.items[-1][0] == "finish"


@pytest.mark.slow
@pytest.mark.timing
async def test_state_is_draining_while_the_last_requests_finish():
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny", speed=2.0)
    sink = ListSink()
    seen: list[tuple[str, str]] = []
    async with serve(slow) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 10, "duration_s": 0.5}, output_tokens=64), sink)

        async def watch() -> None:
            while True:
                await asyncio.sleep(0.1)
                seen.append((run.state, progress_line(run.snapshot())))

        watcher = asyncio.create_task(watch())
        result = await run.execute()
        watcher.cancel()

    assert all(r.ok for r in result.requests)
    assert result.duration_s > 0.8  # the last request ended well after the schedule did
    assert "draining" in [s for s, _ in seen]
    assert any(t.state == "draining" and t.in_flight > 0 for t in sink.of("tick"))
    assert any(line.split("]")[1].split()[0] == "draining" for s, line in seen if s == "draining")


@pytest.mark.slow
@pytest.mark.timing
async def test_stop_while_draining_applies_the_grace_period():
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")
    sink = ListSink()
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 10, "duration_s": 0.5}, output_tokens=2000),
            sink,
            stop_grace_s=0.3,
        )

        async def stop_while_draining() -> float:
            while run.state != "draining":  # noqa: ASYNC110 - the run has no event for its state changes
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            run.stop()
            return run.now()

        stopper = asyncio.create_task(stop_while_draining())
        result = await run.execute()
        stopped_at = await stopper

    # 2000 tokens at ~30 ms a step would drain for a minute; the stop cuts it to the grace.
    assert stopped_at + 0.3 <= result.duration_s < stopped_at + 1.5
    assert all(r.error_class == "cancelled" for r in result.requests)


async def test_unreachable_target_raises_naming_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    run = make_run(url, scenario({"kind": "constant", "rate": 5, "duration_s": 1}), ListSink())
    with pytest.raises(TargetUnreachable, match=f"127.0.0.1:{port}"):
        await run.execute()


@pytest.mark.slow
@pytest.mark.timing
async def test_server_errors_count_in_the_error_rate():
    faulty = SimConfig(hardware="instant", model="tiny", faults=FaultConfig(error_rate=0.5), seed=3)
    async with serve(faulty) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 40, "duration_s": 1}), ListSink())
        result = await run.execute()
    failed = [r for r in result.requests if not r.ok]
    assert {r.error_class for r in failed} == {"http_500"}
    assert 0.25 <= result.error_rate <= 0.75
    assert result.error_rate == len(failed) / len(result.requests)


def test_scrape_failures_are_an_event_when_they_start_change_or_end():
    sink = ListSink()
    run = make_run("http://127.0.0.1:1", scenario({"kind": "constant", "rate": 1, "duration_s": 1}), sink)
    url = "http://127.0.0.1:1/metrics"
    samples = [
        ServerSample(t=1.0, url=url, ok=True),
        *(ServerSample(t=1.0 + i, url=url, ok=False, error="connection refused") for i in range(1, 31)),
        ServerSample(t=32.0, url=url, ok=False, error="timeout after 2 s"),
        ServerSample(t=33.0, url=url, ok=True),
    ]
    for sample in samples:
        run._on_sample(sample)
    assert len(sink.of("scrape")) == len(samples)  # every scrape is still published (and recorded)
    assert [(e.t, e.kind, e.message) for e in sink.of("event")] == [
        (2.0, "scrape_error", f"{url}: connection refused"),
        (32.0, "scrape_error", f"{url}: timeout after 2 s"),
        (33.0, "info", f"{url}: answering again after 31 failed scrapes"),
    ]


@pytest.mark.slow
@pytest.mark.timing
async def test_ending_the_drain_now_cancels_in_flight_requests_and_records_it():
    """The UI's end-the-drain key: every request still streaming is cancelled at once
    (no grace period), the cancel is an event, the requests are counted as cancelled (not
    failed) and the run is interrupted (its exit code is 130)."""
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")
    sink = ListSink()
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 10, "duration_s": 0.5}, output_tokens=2000),
            sink,
            stop_grace_s=60.0,
        )

        async def end_the_drain() -> tuple[float, int, float | None]:
            while run.state != "draining":  # noqa: ASYNC110 - the run has no event for its state changes
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            in_flight, oldest = run.in_flight, run.oldest_sent_at
            run.cancel_in_flight()
            return run.now(), in_flight, oldest

        ender = asyncio.create_task(end_the_drain())
        result = await run.execute()
        ended_at, in_flight, oldest = await ender

    assert result.duration_s < ended_at + 1.0  # not the 60 s grace period
    assert result.interrupted
    cancelled = [r for r in result.requests if r.error_class == "cancelled"]
    assert len(cancelled) == in_flight == len(result.requests) >= 4
    assert oldest == pytest.approx(min(r.sent_at for r in result.requests), abs=0.01)
    cancels = [e for e in sink.of("event") if e.kind == "cancel"]
    assert len(cancels) == 1 and cancels[0].data == {"requests": in_flight, "in_flight": in_flight}
    draining = [t for t in sink.of("tick") if t.state == "draining"]
    assert draining and all(t.oldest_sent_at == pytest.approx(oldest, abs=0.01) for t in draining)
    from rampwatch.core.figures.summary import summarise_requests

    summary = summarise_requests(result.header, result.requests, [], result.events)
    assert (summary.completed, summary.failed, summary.cancelled) == (0, 0, len(cancelled))
    assert "cancelled" not in summary.errors_by_class


@pytest.mark.slow
@pytest.mark.timing
async def test_the_peak_in_flight_on_screen_is_the_summarys_peak_concurrency():
    """One definition: requests sent and not ended, whatever their outcome. The run's
    exact peak (in its ticks) equals the peak overlap of the records' [sent, end)
    intervals that the final summary reports, failed and cancelled requests included."""
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")
    sink = ListSink()
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 20, "duration_s": 1.0}, output_tokens=2000),
            sink,
            stop_grace_s=0.3,
        )

        async def stop_soon() -> None:
            await asyncio.sleep(1.2)
            run.stop()

        stopper = asyncio.create_task(stop_soon())
        result = await run.execute()
        await stopper

    from rampwatch.core.figures.summary import summarise_requests

    summary = summarise_requests(result.header, result.requests, [], result.events)
    assert any(r.error_class == "cancelled" for r in result.requests)
    peak = sink.of("tick")[-1].peak_in_flight
    assert peak == summary.peak_concurrent_requests == len(result.requests) >= 15
    assert run.series.snapshot().summary["max_concurrent_requests"] == peak


@pytest.mark.slow
@pytest.mark.timing
async def test_steering_that_changes_nothing_is_not_recorded():
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 20, "duration_s": 0.6}), sink)

        async def steer() -> None:
            await asyncio.sleep(0.2)
            run.resume()  # not holding: nothing to resume
            run.hold()
            run.hold()  # already holding
            run.resume()

        steering = asyncio.create_task(steer())
        await run.execute()
        await steering
        run.hold()
        run.mark("after the end")
        run.cancel_in_flight()

    kinds = [e.kind for e in sink.of("event")]
    assert kinds.count("hold") == 1 and kinds.count("resume") == 1
    assert "mark" not in kinds and "cancel" not in kinds
    assert sink.items[-1][0] == "finish"


@pytest.mark.slow
@pytest.mark.timing
async def test_ticks_carry_the_plan_moved_on_by_a_hold():
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 5, "duration_s": 2.0}), sink)

        async def hold_a_while() -> tuple[float, float]:
            await asyncio.sleep(0.5)
            run.hold()
            held_at = run.now()
            await asyncio.sleep(1.0)
            run.resume()
            return held_at, run.now()

        holder = asyncio.create_task(hold_a_while())
        result = await run.execute()
        held_at, resumed_at = await holder

    ticks = sink.of("tick")
    assert ticks[0].planned_end_s == pytest.approx(2.0)
    holding = [t for t in ticks if t.state == "holding"]
    assert holding and all(t.planned_end_s == pytest.approx(2.0 + t.t - held_at, abs=0.01) for t in holding)
    assert ticks[-1].planned_end_s == pytest.approx(2.0 + resumed_at - held_at, abs=0.01)
    assert result.duration_s == pytest.approx(ticks[-1].planned_end_s, abs=0.3)


@pytest.mark.slow
@pytest.mark.timing
async def test_requests_cancelled_while_waiting_for_a_slot_are_recorded_not_lost():
    """With a concurrency cap, ending the drain also cancels requests still queued for a
    slot: each is recorded as cancelled (never sent), so every offered request has a record."""
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")
    sink = ListSink()
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 20, "duration_s": 0.5}, output_tokens=2000, max_concurrency=2),
            sink,
            stop_grace_s=60.0,
        )

        async def end_the_drain() -> None:
            while run.state != "draining":  # noqa: ASYNC110 - the run has no event for its state changes
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)
            run.cancel_in_flight()

        ender = asyncio.create_task(end_the_drain())
        result = await run.execute()
        await ender

    offered = sink.of("tick")[-1].offered_total
    assert offered >= 8 and len(result.requests) == offered
    queued = [r for r in result.requests if r.error is not None and "concurrency slot" in r.error]
    assert len(queued) == offered - 2 and all(r.error_class == "cancelled" and r.e2e == 0 for r in queued)
    assert sink.of("tick")[-1].peak_in_flight == 2


async def test_the_serve_commands_limits_reach_the_knee_detector_with_the_servers_and_the_runs():
    """RunOptions.server_limits (a managed `vllm serve`'s) joined at the start with the
    server's cache config and the run's concurrency cap: what a knee is explained with."""
    from rampwatch.core.figures.server_limits import ServerLimits

    given = ServerLimits.from_engine_args({"max_num_seqs": "64", "max_num_batched_tokens": "8192"})
    sim = dataclasses.replace(INSTANT, num_gpu_blocks=512)
    async with serve(sim) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 10, "duration_s": 0.3}, max_concurrency=4),
            ListSink(),
            server_limits=given,
        )
        await run.execute()
    limits = run.knee.limits
    assert (limits.max_num_seqs, limits.max_num_batched_tokens) == (64, 8192)
    assert (limits.num_gpu_blocks, limits.block_size, limits.max_concurrency) == (512, 16, 4)
    assert limits.sources == {
        "max_num_seqs": "serve command",
        "max_num_batched_tokens": "serve command",
        "num_gpu_blocks": "/metrics cache_config_info",
        "block_size": "/metrics cache_config_info",
        "gpu_memory_utilization": "/metrics cache_config_info",
        "max_concurrency": "run options",
    }


@pytest.mark.slow
@pytest.mark.timing
async def test_requests_built_in_their_own_process_are_all_sent_in_order():
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 40, "duration_s": 1.0}), sink)
        run.requests.ahead_above_s = 0.0  # whatever they cost
        result = await run.execute()
    assert run.factory._count == PROBE_REQUESTS  # the rest were built in the builder process
    records = sorted(sink.of("request"), key=lambda r: r.id)
    assert [r.id for r in records] == list(range(40))
    assert all(r.ok and r.prompt_tokens == 32 for r in records), [r.error for r in records if not r.ok]
    assert not result.interrupted


@pytest.mark.slow
@pytest.mark.timing
async def test_a_request_builder_killed_mid_run_stops_the_run_with_its_records_kept():
    sink = SentSink(20)
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 40, "duration_s": 30.0}), sink)
        run.requests.ahead_above_s = 0.0  # whatever they cost: built in the builder process

        async def kill_the_builder() -> None:
            await sink.reached.wait()
            run.requests._process.kill()  # as the OOM killer would

        killer = asyncio.create_task(kill_the_builder())
        result = await run.execute()
        await killer
    assert result.interrupted  # stopped, not crashed: the summary and the recording follow
    errors = [e for e in sink.of("event") if e.kind == "error"]
    assert len(errors) == 1 and errors[0].data == {"request_builder_lost": True}
    assert errors[0].message.startswith("the request builder process ")
    records = sorted(sink.of("request"), key=lambda r: r.id)
    assert [r.id for r in records] == list(range(len(records))) and len(records) >= 20  # none lost
    assert sink.items[-1][0] == "finish"


class FailsAt:
    """The run's own factory until its ``fail_at``-th request, which raises (a bug, a
    dataset row the factory chokes on, an image's MemoryError)."""

    def __init__(self, factory, fail_at: int) -> None:
        self.factory, self.fail_at, self.count = factory, fail_at, 0

    def next_request(self):
        self.count += 1
        if self.count == self.fail_at:
            raise MemoryError("an image of 3 GB")
        return self.factory.next_request()


@pytest.mark.slow
@pytest.mark.timing
async def test_a_request_that_cannot_be_built_stops_the_run_with_one_error_and_its_records_kept():
    sink = ListSink()
    async with serve(INSTANT) as url:
        run = make_run(url, scenario({"kind": "constant", "rate": 40, "duration_s": 30.0}), sink)
        # built on the run's loop at each take (the in-process path; the builder
        # process's failure reaches take() the same way: tests/loadgen/workload)
        run.requests = RequestsAhead(FailsAt(run.factory, fail_at=12), ahead_above_s=float("inf"))
        result = await run.execute()
    assert result.interrupted  # stopped, not crashed: the summary and the recording follow
    errors = [e for e in sink.of("event") if e.kind == "error"]
    assert [(e.message, e.data) for e in errors] == [
        (
            "building request 12 failed: MemoryError: an image of 3 GB: the run stops here",
            {"request_build_failed": True},
        )
    ]
    records = sorted(sink.of("request"), key=lambda r: r.id)
    assert [r.id for r in records] == list(range(11))  # the 11 built were sent and drained
    assert sink.items[-1][0] == "finish"


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.parametrize(
    ("policy", "lasts_at_least", "lasts_under"),
    [
        (DrainPolicy("cap", 0.6), 0.5 + 0.6, 0.5 + 0.6 + 1.0),  # 2000 tokens each: a minute's drain, cut at 0.6 s
        (DrainPolicy("cancel"), 0.5, 0.5 + 1.0),
    ],
)
async def test_a_drain_policy_cancels_what_is_left_as_planned_not_interrupted(policy, lasts_at_least, lasts_under):
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")
    sink = ListSink()
    async with serve(slow) as url:
        run = make_run(
            url,
            scenario({"kind": "constant", "rate": 10, "duration_s": 0.5}, output_tokens=2000),
            sink,
            drain=policy,
        )
        result = await run.execute()
    assert lasts_at_least <= result.duration_s < lasts_under
    cancelled = [r for r in result.requests if r.error_class == "cancelled"]
    assert len(cancelled) == len(result.requests) >= 4  # every request recorded: cancelled, never lost
    assert not result.interrupted and result.error_rate == 0.0  # the plan, not a stop
    (cancel,) = [e for e in sink.of("event") if e.kind == "cancel"]
    assert cancel.data == {"requests": len(cancelled), "in_flight": len(cancelled), "drain": str(policy)}
    start = sink.of("start")[0]
    assert start.options["drain"] == str(policy)
    assert policy.describe() in sink.of("event")[0].message


@pytest.mark.slow
@pytest.mark.timing
async def test_the_wait_policy_waits_for_every_request_and_a_cap_longer_than_the_drain_cancels_nothing():
    slow = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny", speed=2.0)
    for policy in (DrainPolicy(), DrainPolicy("cap", 60.0)):
        sink = ListSink()
        async with serve(slow) as url:
            run = make_run(
                url, scenario({"kind": "constant", "rate": 10, "duration_s": 0.5}, output_tokens=64), sink, drain=policy
            )
            result = await run.execute()
        assert result.requests and all(r.ok for r in result.requests)
        assert not [e for e in sink.of("event") if e.kind == "cancel"]
