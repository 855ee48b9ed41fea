"""The bridge runs the load in a forked process; the UI only reads the snapshots it
publishes and sends it RunControl calls."""

import asyncio
import dataclasses
import math
import os
import threading
import time

import pytest

from rampwatch.app.bridge import ItemForwarder, ProcessBridge, SeriesMirror, feed_items, tail_of, with_tail
from rampwatch.app.live import start_live
from rampwatch.core.errors import UserError
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import Event, FanoutSink, NullSink, RequestRecord, ServerSample, Snapshot, Tick
from rampwatch.loadgen.run import eventloop
from tests.tui.fakes import FakeControl, fake_header, fake_mixed_snapshot, fake_snapshot

# How long a test waits for the run process to publish: generous, since forking and
# publishing may take seconds on a loaded machine; a passing test waits only as long as
# the publishing takes.
PUBLISH_WAIT_S = 60.0


def wait_published(bridge: ProcessBridge, count: int) -> None:
    """Until the UI side has received ``count`` snapshots (another process: polled)."""
    deadline = time.monotonic() + PUBLISH_WAIT_S
    while bridge.snapshots_published < count:
        assert time.monotonic() < deadline, f"{bridge.snapshots_published} snapshots published, {count} expected"
        threading.Event().wait(0.01)


def first_seconds(whole: Snapshot, t: float) -> Snapshot:
    """``whole``'s first ``t`` seconds of bins, as ``fake_snapshot(t)`` has them."""
    n = int(t)
    series = {name: values[:n] for name, values in whole.series.items()}
    return dataclasses.replace(whole, t=t, times=whole.times[:n], series=series)


class SteeredRun:
    """A toy run that lasts until stopped and returns the controls it received, with the
    process they ran in."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.stopped: asyncio.Event | None = None

    async def run(self) -> dict:
        self.stopped = asyncio.Event()
        await self.stopped.wait()
        return {"pid": os.getpid(), "calls": self.calls}

    def snapshot(self):
        return fake_snapshot(5.0, state="done" if self.stopped is not None and self.stopped.is_set() else "ramping")

    def hold(self) -> None:
        self.calls.append("hold")

    def step_rate(self, delta_rps: float) -> None:
        self.calls.append(f"step_rate:{delta_rps:g}")

    def mark(self, note: str) -> None:
        self.calls.append(f"mark:{note}")

    def stop(self) -> None:
        self.calls.append("stop")
        self.stopped.set()

    def cancel_in_flight(self) -> None:
        self.calls.append("cancel_in_flight")


@pytest.mark.slow
def test_process_bridge_runs_the_load_in_a_child_process():
    run = SteeredRun()
    bridge = ProcessBridge(run.run, run.snapshot, run, publish_interval=0.02).start()
    wait_published(bridge, 1)
    assert bridge.snapshot().t == 5.0
    bridge.control.hold()
    bridge.control.step_rate(1.5)
    bridge.control.mark("n1")
    bridge.control.cancel_in_flight()  # the end-the-drain key goes through the same pipe
    result = bridge.finish(drain_timeout=10.0)
    assert result["pid"] != os.getpid()
    assert result["calls"] == ["hold", "step_rate:1.5", "mark:n1", "cancel_in_flight", "stop"]
    assert run.calls == []  # nothing ran in this process
    assert bridge.snapshot().state == "done"  # the final state is published
    bridge.control.hold()  # after the end: dropped, no error
    assert bridge.finish() == result


@pytest.mark.slow
def test_process_bridge_hands_back_the_run_error():
    async def failing():
        raise UserError("http://127.0.0.1:9: connection refused")

    bridge = ProcessBridge(failing, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.05).start()
    assert bridge.join(10.0)
    with pytest.raises(UserError, match="connection refused"):
        bridge.finish()


@pytest.mark.slow
def test_a_model_the_server_does_not_serve_keeps_its_exit_code_through_the_bridge():
    from rampwatch.core.errors import ModelNotServed

    async def failing():
        raise ModelNotServed("--model 'x' is not served by http://h/v1/models: it serves 'tiny'")

    bridge = ProcessBridge(failing, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.05).start()
    assert bridge.join(10.0)
    with pytest.raises(ModelNotServed, match="it serves 'tiny'") as caught:
        bridge.finish()
    assert caught.value.exit_code == 4  # what the command line exits with


def test_a_snapshot_tail_on_the_previous_snapshot_gives_the_new_snapshot():
    before, after = fake_snapshot(100.0), fake_snapshot(103.5)
    start, tail = tail_of(after, bins=10)
    assert start == 93 and len(tail.times) == 10 and all(len(v) == 10 for v in tail.series.values())
    rebuilt = with_tail(before, start, tail)
    assert rebuilt.times == after.times
    for name, values in after.series.items():
        assert rebuilt.series[name] == pytest.approx(values, nan_ok=True)
    assert rebuilt.t == after.t and rebuilt.events == after.events
    assert tail_of(fake_snapshot(5.0), bins=10) == (0, fake_snapshot(5.0))
    with pytest.raises(ValueError):
        with_tail(fake_snapshot(20.0), 50, tail)


def test_a_tail_built_from_the_last_bins_only_is_the_tail_of_the_whole_snapshot():
    """Between full snapshots the run process builds its newest bins only (a day's series
    as Python lists take ~1 s to build): the tail sent is the same."""
    from rampwatch.app.bridge import TAIL_BINS
    from rampwatch.core.figures.series import SeriesBuilder
    from tests.synthetic import SyntheticRun, play_synthetic

    builder = SeriesBuilder()
    play_synthetic(SyntheticRun(duration_s=200, start_rps=2, end_rps=6, seed=4), builder, finish=False)
    now = builder.now - 0.3
    start, tail = tail_of(builder.snapshot(now, last_bins=TAIL_BINS))
    want_start, want = tail_of(builder.snapshot(now))
    assert start == want_start > 0 and tail.times == want.times and len(tail.times) == TAIL_BINS
    for name, values in want.series.items():
        assert tail.series[name] == pytest.approx(values, nan_ok=True)
    assert tail.summary == want.summary and tail.events == want.events


def test_a_mixtures_class_series_travel_as_tails_too():
    before, after = fake_mixed_snapshot(100.0), fake_mixed_snapshot(103.5)
    start, tail = tail_of(after, bins=10)
    assert all(len(v) == 10 for c in tail.classes for v in c.series.values())
    rebuilt = with_tail(before, start, tail)
    assert [c.name for c in rebuilt.classes] == [c.name for c in after.classes]
    for got, want in zip(rebuilt.classes, after.classes, strict=True):
        assert got.summary == want.summary
        for name, values in want.series.items():
            assert got.series[name] == pytest.approx(values, nan_ok=True)
    # a class the previous snapshot did not have yet: no data before its tail
    newcomer = with_tail(dataclasses.replace(before, classes=before.classes[:1]), start, tail)
    assert all(math.isnan(v) for v in newcomer.classes[1].series["sent_rps"][:start])


@pytest.mark.slow
def test_process_bridge_rebuilds_long_runs_from_tails():
    """After the first publish the run sends only recent bins; the UI side must still
    hold the run's whole series."""

    class LongRun:
        def __init__(self):
            self.t = 300.0
            self.stopped = None
            # Built once: fake_snapshot of 300 s costs ~80 ms, which at every publish made
            # the run process CPU-bound on a loaded machine.
            self.whole = fake_snapshot(400.0)

        async def run(self):
            self.stopped = asyncio.Event()
            await self.stopped.wait()

        def snapshot(self):
            self.t += 1.0  # a new bin at every publish
            return first_seconds(self.whole, min(self.t, 400.0))

        def stop(self):
            self.stopped.set()

    run = LongRun()
    bridge = ProcessBridge(run.run, run.snapshot, run, publish_interval=0.01).start()
    wait_published(bridge, 8)
    seen = bridge.snapshot()
    assert bridge.snapshots_published >= 8 and len(seen.times) > 300
    expected = fake_snapshot(seen.t)
    assert seen.times == expected.times
    assert seen.series["completed_rps"] == pytest.approx(expected.series["completed_rps"])
    bridge.finish(drain_timeout=10.0)


@pytest.mark.slow
def test_process_bridge_cancels_in_flight_requests_when_the_drain_overruns():
    """A stop whose drain outlasts the timeout: the run is asked to cancel its in-flight
    requests and then ends normally, with its result (not a CancelledError)."""

    class SlowDrain:
        def __init__(self):
            self.calls = []
            self.in_flight = None

        async def run(self):
            self.in_flight = asyncio.Event()
            await self.in_flight.wait()  # a stop alone does not end it: requests are slow
            return {"calls": self.calls}

        def snapshot(self):
            return fake_snapshot(5.0)

        def stop(self):
            self.calls.append("stop")

        def cancel_in_flight(self):
            self.calls.append("cancel_in_flight")
            self.in_flight.set()

    run = SlowDrain()
    bridge = ProcessBridge(run.run, run.snapshot, run, publish_interval=0.05).start()
    assert bridge.finish(drain_timeout=0.3) == {"calls": ["stop", "cancel_in_flight"]}


@pytest.mark.slow
def test_process_bridge_hands_back_a_result_larger_than_the_pipe_buffer():
    # The run process's loop (uvloop) must not leave the pipe non-blocking: a result
    # of many megabytes (an hour's records) has to wait for the UI to read it.
    assert eventloop.loop_name() == "uvloop"
    payload = list(range(2_000_000))

    async def run():
        await asyncio.sleep(0.2)
        return payload

    bridge = ProcessBridge(run, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.02).start()
    assert bridge.finish(drain_timeout=20.0) == payload


@pytest.mark.slow
def test_a_run_that_ignores_stop_and_cancel_in_flight_is_cancelled():
    async def stubborn():
        await asyncio.sleep(30)

    bridge = ProcessBridge(stubborn, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.01).start()
    with pytest.raises(asyncio.CancelledError):
        bridge.finish(drain_timeout=0.2, escalation_timeout=0.5)
    assert bridge.done


@pytest.mark.slow
async def test_app_keys_reach_the_run_process():
    run = SteeredRun()
    bridge, app = start_live(run.run, run.snapshot, run, rate_step_rps=2.0, ui_priority="normal")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("space", "plus", "s")
        await pilot.pause(0.2)
    result = bridge.finish(drain_timeout=5.0)
    assert result["pid"] != os.getpid()
    assert result["calls"] == ["hold", "step_rate:2", "stop"]


@pytest.mark.slow
async def test_app_leaves_when_the_run_fails():
    async def failing():
        raise ValueError("boom")

    bridge, app = start_live(failing, lambda: fake_snapshot(1.0), FakeControl(), ui_priority="normal")
    assert bridge.join(10.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)
    assert app.return_code == 1
    with pytest.raises(ValueError, match="boom"):
        bridge.finish()


def timeline(sink, seconds: int) -> None:
    """A run's items (requests, ticks, a scrape each second) for ``seconds`` seconds."""
    sink.on_start(fake_header())
    for s in range(seconds):
        one_second(sink, s)


def one_second(sink, s: int) -> None:
    """Second ``s`` of ``timeline``."""
    for j in range(5):
        end = s + j / 5
        sink.on_request(RequestRecord(5 * s + j, end - 0.5, end - 0.5, end, end - 0.4, [end - 0.4, end - 0.2], 9, 2))
    sink.on_scrape(ServerSample(s + 0.5, "http://127.0.0.1:8000/metrics", True, "vllm", running=3, waiting=s))
    sink.on_tick(Tick(s + 1.0, 5.0, "ramping", 2, 0, offered_total=5 * (s + 1), sent_total=5 * (s + 1)))


class ItemsRun:
    """A toy run whose sinks get a run's items, a second of them per loop pass; it counts
    the snapshots its own loop builds."""

    SECONDS = 30

    def __init__(self) -> None:
        self.series = SeriesBuilder()
        self.sink = FanoutSink(self.series)
        self.t = 0.0
        self.snapshots_built = 0
        self.stopped: asyncio.Event | None = None

    async def run(self) -> dict:
        self.stopped = asyncio.Event()
        batch = FanoutSink()

        class Clocked(NullSink):  # the run's clock follows its items
            def on_tick(inner, tick: Tick) -> None:
                self.t = tick.t

        batch.sinks = [self.sink, Clocked()]
        batch.on_start(fake_header())
        for s in range(self.SECONDS):  # over several publishes
            one_second(batch, s)
            await asyncio.sleep(0.005)
        await self.stopped.wait()
        return {"snapshots_built_on_the_loop": self.snapshots_built}

    def snapshot(self) -> Snapshot:
        self.snapshots_built += 1
        return self.series.snapshot(self.t)

    def stop(self) -> None:
        assert self.stopped is not None
        self.stopped.set()


@pytest.mark.slow
def test_a_mirrored_run_is_drawn_from_snapshots_built_in_the_ui_process_the_same_as_the_runs():
    run = ItemsRun()
    mirror = SeriesMirror(run.series, run.sink.sinks.append, lambda: run.t)
    bridge = ProcessBridge(run.run, run.snapshot, run, publish_interval=0.02, mirror=mirror).start()
    deadline = time.monotonic() + PUBLISH_WAIT_S
    while bridge.snapshot().t < ItemsRun.SECONDS:  # every item has crossed
        assert time.monotonic() < deadline, f"the mirror is at {bridge.snapshot().t} s"
        threading.Event().wait(0.01)
    drawn = bridge.snapshot()
    assert bridge.snapshots_published > 1  # the newest bins rebuilt on the previous snapshot too
    result = bridge.finish(drain_timeout=10.0)
    assert result == {"snapshots_built_on_the_loop": 0}
    expected = SeriesBuilder()
    timeline(expected, ItemsRun.SECONDS)
    assert repr(drawn) == repr(expected.snapshot(float(ItemsRun.SECONDS)))  # NaN == NaN in a repr
    assert len(drawn.times) == ItemsRun.SECONDS and drawn.summary["completed"] == 5 * ItemsRun.SECONDS


@pytest.mark.slow
def test_a_mirror_the_ui_does_not_keep_up_with_gives_way_to_the_runs_own_snapshots(monkeypatch):
    import rampwatch.app.bridge as bridge_module

    monkeypatch.setattr(bridge_module, "MIRROR_MAX_PENDING_BYTES", 1)  # the first item is too many
    run = ItemsRun()
    mirror = SeriesMirror(run.series, run.sink.sinks.append, lambda: run.t)
    bridge = ProcessBridge(run.run, run.snapshot, run, publish_interval=0.02, mirror=mirror).start()
    deadline = time.monotonic() + PUBLISH_WAIT_S
    while bridge.snapshot().t < ItemsRun.SECONDS:
        assert time.monotonic() < deadline, f"the run's snapshots are at {bridge.snapshot().t} s"
        threading.Event().wait(0.01)
    drawn = bridge.snapshot()
    result = bridge.finish(drain_timeout=10.0)
    assert result["snapshots_built_on_the_loop"] > 0  # the run process built them
    assert not mirror.builder.events  # nothing was fed to the mirror here
    expected = SeriesBuilder()
    timeline(expected, ItemsRun.SECONDS)
    assert repr(drawn) == repr(expected.snapshot(float(ItemsRun.SECONDS)))


def test_an_item_forwarder_keeps_nothing_once_too_much_waited():
    forwarder = ItemForwarder()
    forwarder.on_event(Event(1.0, "mark", "a"))
    builder = SeriesBuilder()
    feed_items(builder, forwarder.take())
    assert [e.message for e in builder.events] == ["a"] and forwarder.take() == b""
    forwarder.max_pending_bytes = 200
    for i in range(10):
        forwarder.on_event(Event(2.0 + i, "mark", "x" * 50))
    assert forwarder.given_up and forwarder.take() == b""


def test_a_reasoning_runs_series_travel_as_tails_too():
    from rampwatch.core.figures.series import SeriesBuilder
    from tests.core.figures.reasoning_records import Reasoning
    from tests.synthetic import SyntheticRun, play_synthetic

    builder = SeriesBuilder()
    play_synthetic(SyntheticRun(duration_s=60, start_rps=2, end_rps=6, seed=4), Reasoning(builder), finish=False)
    before, after = builder.snapshot(builder.now - 3.0), builder.snapshot(builder.now)
    start, tail = tail_of(after, bins=10)
    assert tail.reasoning is not None and all(len(v) == 10 for v in tail.reasoning.values())
    rebuilt = with_tail(before, start, tail)
    assert rebuilt.reasoning is not None and after.reasoning is not None
    for name, values in after.reasoning.items():
        assert rebuilt.reasoning[name] == pytest.approx(values, nan_ok=True)


@pytest.mark.slow
def test_work_after_the_result_does_not_hold_the_result_and_is_waited_for(tmp_path):
    """``after`` (a live run's --prometheus-linger): the result comes back at the run's
    end, the process goes on until ``after`` returns, and ``wait_process`` waits for it."""
    release, ran = tmp_path / "release", tmp_path / "ran"

    def after() -> None:  # in the run's process: until the test lets it go
        while not release.exists():  # noqa: ASYNC110 (a plain function in another process)
            time.sleep(0.02)
        ran.write_text("yes")

    async def quick() -> str:
        return "result"

    bridge = ProcessBridge(quick, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.02, after=after)
    bridge.start()
    started = time.monotonic()
    assert bridge.join(10.0) and bridge.finish() == "result"
    assert time.monotonic() - started < 4.0  # not the reader's 5 s wait for the process
    assert bridge.process_alive() and not ran.exists()
    release.write_text("go")
    assert bridge.wait_process(10.0) is True
    assert ran.read_text() == "yes" and not bridge.process_alive()
