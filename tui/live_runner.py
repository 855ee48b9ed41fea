"""Running a live load in its own thread and event loop, so drawing the UI can never
delay a send.

The run thread owns the run (its coroutine, the series builder, the run control). The
UI thread only ever

- reads the latest published Snapshot from a locked slot (``LiveBridge.snapshot``), and
- asks the run loop to call RunControl methods (``ThreadSafeControl``, through
  ``loop.call_soon_threadsafe``),

so nothing the run owns is touched from two threads.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable

from loadgen.timeline import RunControl, Snapshot

PUBLISH_INTERVAL_S = 0.25


def _starting_snapshot() -> Snapshot:
    return Snapshot(
        t=0.0, header=None, state="starting", target_rps=0.0, times=[], series={}, in_flight=0,
        events=[], summary={}, server_metrics_available=True, planned_duration_s=None,
    )


class ThreadSafeControl:
    """A RunControl whose calls run on the run's loop, whatever thread makes them.

    Calls after the run has finished are dropped: there is nothing left to steer.
    """

    def __init__(self, control: RunControl, bridge: "LiveBridge") -> None:
        self._control = control
        self._bridge = bridge

    def _call(self, name: str, *args: Any) -> None:
        loop = self._bridge.loop
        if loop is None or loop.is_closed() or self._bridge.done:
            return
        try:
            loop.call_soon_threadsafe(getattr(self._control, name), *args)
        except RuntimeError:  # loop closed between the check and the call
            pass

    def hold(self) -> None:
        self._call("hold")

    def resume(self) -> None:
        self._call("resume")

    def set_rate(self, rps: float) -> None:
        self._call("set_rate", rps)

    def step_rate(self, delta_rps: float) -> None:
        self._call("step_rate", delta_rps)

    def mark(self, note: str) -> None:
        self._call("mark", note)

    def stop(self) -> None:
        self._call("stop")


class LiveBridge:
    """Runs ``run_coro_factory()`` on a fresh event loop in a daemon thread and publishes
    ``snapshot_fn()`` (called on that loop) every ``publish_interval`` seconds.

    It is a ``SnapshotSource`` for the UI; ``control`` is the thread-safe RunControl.
    """

    def __init__(
        self,
        run_coro_factory: Callable[[], Awaitable[Any]],
        snapshot_fn: Callable[[], Snapshot],
        control: RunControl,
        *,
        publish_interval: float = PUBLISH_INTERVAL_S,
    ) -> None:
        self._run_coro_factory = run_coro_factory
        self._snapshot_fn = snapshot_fn
        self._publish_interval = publish_interval
        self._lock = threading.Lock()
        self._latest: Snapshot = _starting_snapshot()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.control = ThreadSafeControl(control, self)
        self.done = False
        self.failure: BaseException | None = None
        self.result: Any = None
        self.snapshots_published = 0

    # ----- UI side -----

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._latest

    def start(self) -> "LiveBridge":
        self._thread = threading.Thread(target=self._thread_main, name="rampwatch-run", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10.0)
        return self

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the run to end; True when it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.done

    def cancel(self) -> None:
        """Abandon the run (after a graceful stop took too long)."""
        loop, task = self.loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:
                pass

    def finish(self, drain_timeout: float = 30.0) -> Any:
        """Stop gracefully, wait up to ``drain_timeout`` for the drain, then cancel; return
        the run's result or raise its exception."""
        if not self.done:
            self.control.stop()
            if not self.join(drain_timeout):
                self.cancel()
                self.join(10.0)
        if self.failure is not None:
            raise self.failure
        return self.result

    # ----- run thread -----

    def _publish(self) -> None:
        snapshot = self._snapshot_fn()
        with self._lock:
            self._latest = snapshot
        self.snapshots_published += 1

    async def _publisher(self) -> None:
        while True:
            await asyncio.sleep(self._publish_interval)
            self._publish()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._task = asyncio.ensure_future(self._run_coro_factory())
        publisher = asyncio.ensure_future(self._publisher())
        self._ready.set()
        try:
            self.result = await self._task
        finally:
            publisher.cancel()
            try:
                self._publish()  # the final state, so the UI shows "done" and the full run
            except Exception:
                pass

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except asyncio.CancelledError as exc:
            self.failure = exc
        except BaseException as exc:  # handed to the UI thread by finish()
            self.failure = exc
        finally:
            self.done = True
            self._ready.set()
