"""The client's own timing: how late its event loops ran what was due (``LoopLagProbe``),
and Python's garbage collector kept from pausing them while the load runs
(``LoadPhaseGC``). ``ClientHealth`` folds both, from every process that sends, into what
a tick carries; ``ClientTotals`` folds ticks into the run's figures (live and read back).

Why a full collection must not run during the load: it walks every object alive, and
with thousands of streams in flight that is a pause of ~200 ms on a 16-core machine,
during which no request is sent and no chunk is read (the pause lands in the lateness,
the TTFT and the ITL of the streams open at the time).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.core.figures.client_lag import (
    GC_POLICIES,
    ClientCounts,
    LagHistogram,
)

# The probe wakes on a fixed grid this far apart. Each grid point the loop passed late is
# one sample (``now - due``), so a stall of S ms gives S / 5 samples: the samples are
# spread evenly in time, and their distribution is how long an event arriving at a
# random moment (a chunk, a send time) waited for the loop beyond its turn.
LAG_SAMPLE_INTERVAL_S = 0.005

# A load worker (a local process, a Ray actor) hands its window to the run this often.
WORKER_WINDOW_EVERY_S = 0.5

# A full collection is let run during the load only when the process has grown this much
# since the load began (cycles of objects that lived long enough to reach the oldest
# generation are freed by full collections alone): bounded memory before a pause, and
# the pause is then recorded (an event, the lag).
FULL_COLLECTION_GROWTH_BYTES = 1 << 30
# Never reached: a full collection is only run on purpose while the load runs.
_NO_AUTOMATIC_FULL = 1 << 30
# ``RAMPWATCH_LOAD_GC=python`` leaves Python's own GC policy in place during the load (the
# collections are still counted): to compare the two, or to rule the policy out.
GC_ENV = "RAMPWATCH_LOAD_GC"


def gc_policy_named() -> str:
    """The value of ``GC_ENV`` as a policy's name, lower-cased (empty: the default)."""
    return os.environ.get(GC_ENV, "").strip().lower() or GC_POLICIES[0]


def python_gc_policy() -> bool:
    """Whether the load keeps Python's own GC policy (``GC_ENV``)."""
    return gc_policy_named() == "python"


class LoopLagProbe:
    """Samples how late the running event loop runs a timer due on a fixed grid.

    Start it on the loop it measures (``start``); ``take()`` hands over the samples since
    the last call (the tick does, once a second)."""

    def __init__(self, interval_s: float = LAG_SAMPLE_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._window = LagHistogram()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._due = self._clock() + self.interval_s
        self._handle = self._loop.call_later(self.interval_s, self._wake)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _wake(self) -> None:
        now = self._clock()
        interval = self.interval_s
        # Every grid point passed since the last wake is a sample: one ran late by
        # now - due, the next by an interval less, and so on down to the last one.
        due = self._due
        while due <= now:
            self._window.add((now - due) * 1000.0)
            due += interval
        if due - now > interval:  # woken early (a coarse timer): no point passed
            due = now + interval
        self._due = due
        assert self._loop is not None
        self._handle = self._loop.call_later(max(0.0, due - self._clock()), self._wake)

    def take(self) -> LagHistogram:
        """The samples since the last ``take`` (a new window starts)."""
        window, self._window = self._window, LagHistogram()
        return window


def _schedstat_ms() -> tuple[float, float] | None:
    """This thread's CPU time and its time waiting for a CPU (runnable, not running), in
    ms since it started (Linux's schedstat); None where the kernel does not say."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            on_cpu, waiting = f.read().split()[:2]
        return int(on_cpu) / 1e6, int(waiting) / 1e6
    except (OSError, ValueError):
        return None


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


# Processes may run more than one load at once (tests, an embedder): the first start
# keeps the thresholds, the last stop puts them back.
_policy_users = 0
_saved_thresholds: tuple[int, int, int] | None = None


class LoadPhaseGC:
    """Keeps full collections off the process while its load runs, and counts the
    collections that do run (by generation, with their pauses).

    ``start()``: one full collection, then the start-up heap is frozen (``gc.freeze``:
    never walked again) and the oldest generation's threshold raised out of reach; the
    young generations are still collected (their passes are short: they hold only what
    was allocated since the last one). ``stop()`` puts the thresholds back and unfreezes.
    ``check_growth()`` (once a second) runs a full collection when the process has grown
    by ``growth_bytes`` since the load began, and returns its pause in ms, else None.
    """

    def __init__(
        self, growth_bytes: int = FULL_COLLECTION_GROWTH_BYTES, rss: Callable[[], int | None] = _rss_bytes
    ) -> None:
        self.counts = ClientCounts()
        self.growth_bytes = growth_bytes
        self._rss = rss  # the process's resident bytes (None: unknown)
        self.active = False
        self.applied = False  # the policy in force (not under RAMPWATCH_LOAD_GC=python)
        self._started: float | None = None
        self._rss_at_start: int | None = None

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:
            return
        pause_ms = (time.perf_counter() - self._started) * 1000.0
        self._started = None
        generation = min(int(info.get("generation", 0)), 2)
        self.counts.collections[generation] += 1
        self.counts.max_pause_ms = max(self.counts.max_pause_ms, pause_ms)
        self.counts.total_pause_ms += pause_ms

    def start(self) -> None:
        global _policy_users, _saved_thresholds
        if self.active:
            return
        self.active = True
        self.applied = not python_gc_policy()
        if self.applied:
            if _policy_users == 0:
                gc.collect()
                gc.freeze()
                _saved_thresholds = gc.get_threshold()
                young, middle, _ = _saved_thresholds
                gc.set_threshold(young, middle, _NO_AUTOMATIC_FULL)
            _policy_users += 1
            self._rss_at_start = self._rss()
        gc.callbacks.append(self._on_gc)  # after the start's own collection: the load's only

    def check_growth(self) -> float | None:
        """A full collection when the process grew past the bound since the load began
        (the bound then starts again from here); its pause in ms, else None."""
        if not self.applied or self._rss_at_start is None:
            return None
        rss = self._rss()
        if rss is None or rss - self._rss_at_start < self.growth_bytes:
            return None
        started = time.perf_counter()
        gc.collect()
        self._rss_at_start = self._rss()
        return (time.perf_counter() - started) * 1000.0

    def stop(self) -> None:
        global _policy_users
        if not self.active:
            return
        self.active = False
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if not self.applied:
            return
        _policy_users -= 1
        if _policy_users == 0:
            if _saved_thresholds is not None:
                gc.set_threshold(*_saved_thresholds)
            gc.unfreeze()


@dataclass
class ClientWindow:
    """What the stream-reading loops measured of themselves since the last tick: their lag
    samples and their counts so far (cumulative); and the pause of the full collection
    this process ran for its growth meanwhile (``LoadPhaseGC.check_growth``), if any."""

    lag: LagHistogram = field(default_factory=LagHistogram)
    counts: ClientCounts = field(default_factory=ClientCounts)
    full_gc_pause_ms: float | None = None


class ClientHealth:
    """A process's self-check while its load runs: the lag probe, the GC policy and the
    loop thread's CPU, and the windows its load workers send (``merge_worker``), handed to
    each tick (``take``).

    What a tick gets is the self-check of the loops that read the streams: this process's
    own (``reads_streams``), or else its load workers' alone — a controller's loop reads no
    stream, so its lag cannot move a TTFT or an ITL (it shows in the send lateness), and
    it is not probed. Every ``take`` also lets the GC policy run its growth valve, in the
    run process, a load worker and a Ray actor alike."""

    def __init__(
        self, probe: LoopLagProbe | None = None, gc_policy: LoadPhaseGC | None = None, reads_streams: bool = True
    ) -> None:
        self.probe = probe or LoopLagProbe()
        self.gc_policy = gc_policy or LoadPhaseGC()
        self.reads_streams = reads_streams
        self._workers_lag = LagHistogram()
        self._workers_counts: dict[Any, ClientCounts] = {}  # cumulative, by worker
        self._sched_at_start: tuple[float, float] | None = None

    def start(self) -> None:
        """On the loop to watch (its thread's CPU is read), as the load begins."""
        self.gc_policy.start()
        if self.reads_streams:
            self.probe.start()
            self._sched_at_start = _schedstat_ms()

    def stop(self) -> None:
        self.probe.stop()
        self.gc_policy.stop()

    def merge_worker(self, worker: Any, pairs: Iterable[Iterable[int]], max_ms: float, counts: ClientCounts) -> None:
        """A load worker's window: its lag samples since its last one, its counts so far."""
        self._workers_lag.merge(pairs, max_ms)
        self._workers_counts[worker] = counts

    def own_counts(self) -> ClientCounts:
        """This process's counts so far (on the loop's thread: its CPU is this thread's)."""
        counts = ClientCounts(gc_policy="load" if self.gc_policy.applied else "python")
        counts.merge(self.gc_policy.counts)
        now = _schedstat_ms()
        if now is not None and self._sched_at_start is not None:
            counts.cpu_ms = now[0] - self._sched_at_start[0]
            counts.cpu_wait_ms = now[1] - self._sched_at_start[1]
        return counts

    def take(self) -> ClientWindow:
        """The stream-reading loops' lag since the last call and their counts so far."""
        pause_ms = self.gc_policy.check_growth()
        if self.reads_streams:
            return ClientWindow(self.probe.take(), self.own_counts(), pause_ms)
        lag, self._workers_lag = self._workers_lag, LagHistogram()
        counts = ClientCounts()
        for worker_counts in self._workers_counts.values():
            counts.merge(worker_counts)
        return ClientWindow(lag, counts, pause_ms)


def check_gc_policy() -> None:
    """``GC_ENV`` names a policy this load knows (``load``, the default, or ``python``):
    any other value stops the run before it starts, in one line."""
    if gc_policy_named() not in GC_POLICIES:
        raise UserError(f"{GC_ENV}={os.environ.get(GC_ENV, '')!r}: expected load or python")
