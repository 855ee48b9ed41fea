"""Send lateness with the live UI on vs headless.

A load loop runs in its own forked process (ProcessBridge), as `rampwatch run` runs it
under the UI: it "sends" at a fixed rate (each send does a little client work and starts
a task that lives as long as a streamed request would) and records how late each send
started versus its schedule. The same loop runs twice: once with no UI (the snapshot
still published every 250 ms, nobody drawing it), once with the Textual app drawing
every panel at 160×48 in this process (headless driver: every frame is composed and
rendered, only not written to a terminal). ``--with-thread`` adds the baseline the
process replaced: the run in a thread of the UI process (``LiveBridge``, below).

    python bench/bench_tui_lateness.py [--rate 200] [--duration 10] [--repeat 3] [--a-a] [--speedup 1]

Prints p50/p99/max lateness for each run, then TUI/headless p99 ratios: the median of
the per-round ratios with quartiles, and the pooled ratio with a 95 % bootstrap interval
over rounds (target: p99 within 10 %). With --a-a each round also runs a second
headless side, reported the same way: the spread this machine shows with no UI at all.
Rounds rotate their order so a change in the machine's load hits every side alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# The fake run and control come from the test suite (tests/ is not installed).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rampwatch.app.bridge import (  # noqa: E402
    PUBLISH_INTERVAL_S,
    ForwardingControl,
    ProcessBridge,
    lower_ui_priority,
)
from rampwatch.core.controls import RunControl  # noqa: E402
from rampwatch.core.timeline import Snapshot  # noqa: E402
from tests.tui.fakes import FakeControl, fake_snapshot  # noqa: E402

# ----- the baseline: the run in a thread of the UI process -----
# What `rampwatch run` did before the run got its own process; kept here only to show
# what the process buys (the UI's drawing holds the GIL and delays the run thread).


class ThreadSafeControl(ForwardingControl):
    """A RunControl whose calls run on the run's loop, whatever thread makes them.

    Calls after the run has finished are dropped: there is nothing left to steer.
    """

    def __init__(self, control: RunControl, bridge: LiveBridge) -> None:
        self._control = control
        self._bridge = bridge

    def _forward(self, name: str, *args: Any) -> None:
        loop = self._bridge.loop
        if loop is None or loop.is_closed() or self._bridge.done:
            return
        try:
            loop.call_soon_threadsafe(getattr(self._control, name), *args)
        except RuntimeError:  # loop closed between the check and the call
            pass


class LiveBridge:
    """The thread baseline (``--with-thread``), not what `rampwatch run` uses: runs ``run_coro_factory()`` on a fresh event loop in a daemon thread and publishes
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
        self._latest: Snapshot = Snapshot.empty()
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

    def start(self) -> LiveBridge:
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


# The snapshot the run publishes is the fake ramp's at START_AT_S + elapsed × speedup: at
# speedup 1 one new one-second bin per second, as in a live run (each chart rebuilt about
# once a second); a larger speedup adds bins faster, so every chart is rebuilt at every
# refresh (a stress case: four times the drawing of a live run).
START_AT_S = 60.0


class SyntheticLoad:
    def __init__(self, rate: float, duration: float, speedup: float = 1.0) -> None:
        self.rate = rate
        self.duration = duration
        self.speedup = speedup
        self.lateness: list[float] = []
        self.started = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        interval = 1.0 / self.rate
        tasks: set[asyncio.Task] = set()
        n = 0
        while True:
            scheduled = self.started + n * interval
            if scheduled - self.started > self.duration:
                break
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.lateness.append(loop.time() - scheduled)
            sum(i * i for i in range(200))  # building the request
            task = asyncio.ensure_future(asyncio.sleep(0.5))  # the request in flight
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            n += 1
        await asyncio.gather(*tasks)
        return self.lateness

    def snapshot(self):
        elapsed = time.monotonic() - self._wall0 if hasattr(self, "_wall0") else 0.0
        return fake_snapshot(START_AT_S + elapsed * self.speedup, state="ramping")

    def start_clock(self) -> None:
        self._wall0 = time.monotonic()


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return p(0.50), p(0.99), ordered[-1]


def run_headless(rate: float, duration: float, speedup: float = 1.0) -> list[float]:
    load = SyntheticLoad(rate, duration, speedup)
    load.start_clock()
    bridge = ProcessBridge(load.run, load.snapshot, FakeControl()).start()
    bridge.join()
    return bridge.finish()


def run_with_ui(
    rate: float,
    duration: float,
    bridge_class=ProcessBridge,
    priority: str = "idle",
    refresh_hz: float = 4.0,
    speedup: float = 1.0,
) -> tuple[list[float], str]:
    from rampwatch.tui.app import make_live_app

    load = SyntheticLoad(rate, duration, speedup)
    load.start_clock()
    bridge = bridge_class(load.run, load.snapshot, FakeControl()).start()
    put_back = lower_ui_priority(priority) if bridge_class is ProcessBridge and priority != "normal" else (lambda: None)
    app = make_live_app(bridge, bridge.control, refresh_hz=refresh_hz)
    frames = 0

    async def drive() -> None:
        nonlocal frames
        async with app.run_test(size=(160, 48), headless=True) as pilot:
            while not bridge.done:
                await pilot.pause(0.25)
                frames += 1

    cpu0, wall0 = time.process_time(), time.monotonic()
    try:
        asyncio.run(drive())
    finally:
        put_back()
    ui_cpu_share = (time.process_time() - cpu0) / max(
        time.monotonic() - wall0, 1e-9
    )  # or the next runs' processes (forked from this one) would inherit it
    result = bridge.finish()
    # In a process the lateness list lives in the child: the run returns it.
    return (result if result is not None else load.lateness), f"{frames} {100 * ui_cpu_share:4.1f}%"


def pooled_p99_ratio_interval(
    ui: list[list[float]], base: list[list[float]], draws: int = 2000, seed: int = 1
) -> tuple[float, float, float]:
    """Pooled p99 ratio ui/base with a 95 % bootstrap interval. Runs, not single sends,
    are resampled: lateness comes in bursts inside a run, so resampling sends would claim
    a precision the data does not have."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ui_runs = [np.asarray(run) for run in ui]
    base_runs = [np.asarray(run) for run in base]

    def ratio(indices) -> float:
        top = np.percentile(np.concatenate([ui_runs[i] for i in indices]), 99)
        bottom = np.percentile(np.concatenate([base_runs[i] for i in indices]), 99)
        return float(top / max(bottom, 1e-9))

    n = len(ui_runs)
    point = ratio(range(n))
    samples = sorted(ratio(rng.integers(0, n, n)) for _ in range(draws))
    return point, samples[int(0.025 * draws)], samples[int(0.975 * draws) - 1]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="sends per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds (each: headless, TUI on and, with --a-a, a second headless), order rotated",
    )
    parser.add_argument(
        "--ui-priority",
        choices=("idle", "nice", "normal"),
        default="idle",
        help="the UI process's CPU priority (idle = SCHED_IDLE, run_tui's default; nice = +10)",
    )
    parser.add_argument(
        "--refresh-hz", type=float, default=4.0, help="the app's refresh rate (as `rampwatch run --refresh-hz`)"
    )
    parser.add_argument(
        "--speedup",
        type=float,
        default=1.0,
        help="run seconds the published snapshot advances per second (1: a live run; 20: every chart rebuilt every refresh)",
    )
    parser.add_argument(
        "--a-a",
        action="store_true",
        help="noise floor in the same rounds: a second headless run (headless B) compared with headless the same way",
    )
    parser.add_argument(
        "--with-thread", action="store_true", help="also measure the UI with the run in a thread (not a process)"
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(
        f"rate {args.rate:g}/s, {args.duration:g} s per run, {args.repeat} rounds, UI priority {args.ui_priority}, "
        f"refresh {args.refresh_hz:g} Hz, snapshot speedup {args.speedup:g}x, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {load:.2f} at start"
    )
    print(f"{'':14} {'sends':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8} {'UI frames, CPU':>15}")
    sides = ("headless", "TUI on") + (("headless B",) if args.a_a else ())
    runs: dict[str, list[list[float]]] = {name: [] for name in sides}
    for rep in range(args.repeat):
        # Rotate the order so a change in the machine's load hits every side alike.
        order = sides[rep % len(sides) :] + sides[: rep % len(sides)]
        for name in order:
            if name == "TUI on":
                values, frames = run_with_ui(
                    args.rate,
                    args.duration,
                    priority=args.ui_priority,
                    refresh_hz=args.refresh_hz,
                    speedup=args.speedup,
                )
            else:
                values, frames = run_headless(args.rate, args.duration, args.speedup), ""
            runs[name].append(values)
            p50, p99, worst = percentiles(values)
            print(
                f"{name + f' #{rep + 1}':14} {len(values):7d} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {worst * 1e3:8.3f} "
                f"{statistics.fmean(values) * 1e3:8.3f} {frames!s:>15}"
            )
    if args.with_thread:
        values, frames = run_with_ui(args.rate, args.duration, LiveBridge)
        p50, p99, worst = percentiles(values)
        print(
            f"{'TUI+thread':14} {len(values):7d} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {worst * 1e3:8.3f} "
            f"{statistics.fmean(values) * 1e3:8.3f} {frames:>15}"
        )
    for name, side_runs in runs.items():
        pooled = [v for run in side_runs for v in run]
        p50, p99, worst = percentiles(pooled)
        print(
            f"{name + ' all':14} {len(pooled):7d} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {worst * 1e3:8.3f} "
            f"{statistics.fmean(pooled) * 1e3:8.3f}"
        )
    print()
    verdicts = {}
    for name in sides[1:]:
        r50 = [percentiles(a)[0] / max(percentiles(b)[0], 1e-9) for a, b in zip(runs[name], runs["headless"])]
        r99 = [percentiles(a)[1] / max(percentiles(b)[1], 1e-9) for a, b in zip(runs[name], runs["headless"])]
        q1, q2, q3 = quartiles(r99)
        pooled, low, high = pooled_p99_ratio_interval(runs[name], runs["headless"])
        verdicts[name] = (low, high)
        print(
            f"{name} / headless: p50 median of rounds {statistics.median(r50):.2f}x; "
            f"p99 median of rounds {q2:.2f}x (quartiles {q1:.2f}-{q3:.2f}, range {min(r99):.2f}-{max(r99):.2f}; "
            f"per round {', '.join(f'{r:.2f}' for r in r99)}); "
            f"pooled p99 {pooled:.2f}x, 95 % bootstrap over rounds {low:.2f}-{high:.2f}"
        )
    low, high = verdicts["TUI on"]
    if high <= 1.10:
        verdict = "within the 10 % target (the whole interval is at or under 1.10x)"
    elif low > 1.10:
        verdict = "outside the 10 % target (the whole interval is above 1.10x)"
    else:
        verdict = "not resolved at this sample size (the interval straddles 1.10x)"
    print(f"pooled p99 TUI on / headless: {verdict}; load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
