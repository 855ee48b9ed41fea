"""The bridge runs the load in its own thread and loop; the UI only reads snapshots and
asks the run loop to apply controls."""

import asyncio
import threading

import pytest

from rampwatch.app.bridge import LiveBridge
from rampwatch.tui.app import make_app
from tests.tui.fakes import FakeControl, fake_snapshot


class LoopBoundRun:
    """A toy run: ticks until stopped; its control records the thread it ran on."""

    def __init__(self) -> None:
        self.control = FakeControl()
        self.control_threads: set[str] = set()
        self.stopped: asyncio.Event | None = None
        self.t = 0.0
        self.state = "ramping"

    async def run(self) -> str:
        self.stopped = asyncio.Event()
        while not self.stopped.is_set():
            await asyncio.sleep(0.01)
            self.t += 0.01
        self.state = "done"
        return "finished"

    def snapshot(self):
        return fake_snapshot(max(self.t * 100, 1.0), state=self.state)

    def wrap_control(self):
        run = self

        class Control:
            def __getattr__(self, name):
                method = getattr(run.control, name)

                def call(*args):
                    run.control_threads.add(threading.current_thread().name)
                    method(*args)
                    if name == "stop":
                        run.stopped.set()

                return call

        return Control()


def test_controls_run_on_the_run_thread_and_stop_finishes_the_run():
    run = LoopBoundRun()
    bridge = LiveBridge(run.run, run.snapshot, run.wrap_control(), publish_interval=0.02).start()
    bridge.control.hold()
    bridge.control.step_rate(1.5)
    bridge.control.mark("note")
    assert bridge.finish(drain_timeout=5.0) == "finished"
    assert run.control.calls == [("hold", None), ("step_rate", 1.5), ("mark", "note"), ("stop", None)]
    assert run.control_threads == {"rampwatch-run"}
    assert bridge.snapshot().state == "done"  # the final state is published
    assert bridge.snapshots_published >= 1


def test_snapshots_are_published_while_running():
    run = LoopBoundRun()
    bridge = LiveBridge(run.run, run.snapshot, run.wrap_control(), publish_interval=0.02).start()
    assert bridge.snapshot().state in ("starting", "ramping")
    first = bridge.snapshot().t
    for _ in range(100):
        if bridge.snapshot().t > first:
            break
        threading.Event().wait(0.02)
    assert bridge.snapshot().t > first
    bridge.finish(drain_timeout=5.0)
    calls = list(run.control.calls)
    bridge.control.hold()  # after the end: dropped, no error
    assert run.control.calls == calls == [("stop", None)]


def test_run_errors_reach_the_caller():
    async def failing():
        await asyncio.sleep(0.01)
        raise ValueError("target unreachable")

    bridge = LiveBridge(failing, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.01).start()
    bridge.join(5.0)
    assert bridge.done
    with pytest.raises(ValueError, match="target unreachable"):
        bridge.finish()


def test_a_run_that_ignores_stop_is_cancelled_after_the_drain_timeout():
    async def stubborn():
        await asyncio.sleep(30)

    bridge = LiveBridge(stubborn, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.01).start()
    with pytest.raises(asyncio.CancelledError):
        bridge.finish(drain_timeout=0.2)
    assert bridge.done


async def test_app_keys_reach_the_run_through_the_bridge():
    run = LoopBoundRun()
    bridge = LiveBridge(run.run, run.snapshot, run.wrap_control(), publish_interval=0.05).start()
    app = make_app(bridge, bridge.control, mode="live")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.2)
        await pilot.press("space", "plus", "s")
        await pilot.pause(0.2)
    assert bridge.join(5.0)
    names = [name for name, _ in run.control.calls]
    assert names == ["hold", "step_rate", "stop"]
    assert run.control_threads == {"rampwatch-run"}


async def test_app_leaves_when_the_run_fails():
    async def failing():
        raise ValueError("boom")

    bridge = LiveBridge(failing, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.01).start()
    bridge.join(5.0)
    app = make_app(bridge, bridge.control, mode="live")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)
    assert app.return_code == 1


def test_process_bridge_runs_the_load_in_a_child_process():
    import os

    from rampwatch.app.bridge import ProcessBridge

    class Run:
        def __init__(self):
            self.calls = []
            self.stopped = None

        async def run(self):
            self.stopped = asyncio.Event()
            await self.stopped.wait()
            return {"pid": os.getpid(), "calls": self.calls}

        def snapshot(self):
            return fake_snapshot(5.0, state="ramping" if not self.stopped or not self.stopped.is_set() else "done")

        def hold(self):
            self.calls.append("hold")

        def mark(self, note):
            self.calls.append(f"mark:{note}")

        def stop(self):
            self.calls.append("stop")
            self.stopped.set()

    run = Run()
    bridge = ProcessBridge(run.run, run.snapshot, run, publish_interval=0.02).start()
    for _ in range(200):
        if bridge.snapshots_published:
            break
        threading.Event().wait(0.02)
    assert bridge.snapshot().t == 5.0
    bridge.control.hold()
    bridge.control.mark("n1")
    result = bridge.finish(drain_timeout=10.0)
    assert result["pid"] != os.getpid()
    assert result["calls"] == ["hold", "mark:n1", "stop"]
    assert run.calls == []  # nothing ran in this process
    assert bridge.snapshot().state == "done"


def test_process_bridge_hands_back_the_run_error():
    from rampwatch.app.bridge import ProcessBridge
    from rampwatch.core.errors import UserError

    async def failing():
        raise UserError("http://127.0.0.1:9: connection refused")

    bridge = ProcessBridge(failing, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.05).start()
    assert bridge.join(10.0)
    with pytest.raises(UserError, match="connection refused"):
        bridge.finish()


def test_a_snapshot_tail_on_the_previous_snapshot_gives_the_new_snapshot():
    from rampwatch.app.bridge import tail_of, with_tail

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


def test_process_bridge_rebuilds_long_runs_from_tails():
    """After the first publish the run sends only recent bins; the UI side must still
    hold the run's whole series."""
    from rampwatch.app.bridge import ProcessBridge

    class LongRun:
        def __init__(self):
            self.t = 300.0
            self.stopped = None

        async def run(self):
            self.stopped = asyncio.Event()
            await self.stopped.wait()

        def snapshot(self):
            self.t += 1.0  # a new bin at every publish
            return fake_snapshot(min(self.t, 400.0))

        def stop(self):
            self.stopped.set()

    run = LongRun()
    bridge = ProcessBridge(run.run, run.snapshot, run, publish_interval=0.01).start()
    for _ in range(500):
        if bridge.snapshots_published >= 8:
            break
        threading.Event().wait(0.01)
    seen = bridge.snapshot()
    assert bridge.snapshots_published >= 8 and len(seen.times) > 300
    expected = fake_snapshot(seen.t)
    assert seen.times == expected.times
    assert seen.series["completed_rps"] == pytest.approx(expected.series["completed_rps"])
    bridge.finish(drain_timeout=10.0)


def test_process_bridge_cancels_in_flight_requests_when_the_drain_overruns():
    """A stop whose drain outlasts the timeout: the run is asked to cancel its in-flight
    requests and then ends normally, with its result (not a CancelledError)."""
    from rampwatch.app.bridge import ProcessBridge

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


def test_process_bridge_hands_back_a_result_larger_than_the_pipe_buffer():
    # The run process's loop (uvloop) must not leave the pipe non-blocking: a result
    # of many megabytes (an hour's records) has to wait for the UI to read it.
    from rampwatch.app.bridge import ProcessBridge
    from rampwatch.loadgen import eventloop

    assert eventloop.loop_name() == "uvloop"
    payload = list(range(2_000_000))

    async def run():
        await asyncio.sleep(0.2)
        return payload

    bridge = ProcessBridge(run, lambda: fake_snapshot(1.0), FakeControl(), publish_interval=0.02).start()
    assert bridge.finish(drain_timeout=20.0) == payload
