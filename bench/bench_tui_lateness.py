"""Send lateness with the live UI on vs headless.

A load loop runs in the LiveBridge's own thread and event loop, exactly as `rampwatch
run` runs it under the UI: it "sends" at a fixed rate (each send does a little client
work and starts a task that lives as long as a streamed request would) and records how
late each send started versus its schedule. The same loop runs twice: once with no UI
(same child process, the snapshot still published every 250 ms, nobody drawing it),
once with the run in its own process (ProcessBridge, what `rampwatch run` uses) and
the Textual app drawing every panel at 160×48 in the main thread (headless
driver: every frame is composed and rendered, only not written to a terminal).

    python bench/bench_tui_lateness.py [--rate 200] [--duration 10] [--repeat 3]

Prints p50/p99/max lateness for each run and the median TUI/headless ratios (target:
p99 within 10 %). Pairs alternate their order so a change in the machine's load hits
both sides alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.tui.fakes import FakeControl, fake_snapshot  # noqa: E402
from tui.live_runner import LiveBridge, ProcessBridge, lower_ui_priority  # noqa: E402


class SyntheticLoad:
    def __init__(self, rate: float, duration: float) -> None:
        self.rate = rate
        self.duration = duration
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
        return fake_snapshot(min(max(elapsed * 120.0 / self.duration, 1.0), 120.0))

    def start_clock(self) -> None:
        self._wall0 = time.monotonic()


def percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return p(0.50), p(0.99), ordered[-1]


def run_headless(rate: float, duration: float) -> list[float]:
    load = SyntheticLoad(rate, duration)
    load.start_clock()
    bridge = ProcessBridge(load.run, load.snapshot, FakeControl()).start()
    bridge.join()
    return bridge.finish()


def run_with_ui(rate: float, duration: float, bridge_class=ProcessBridge, priority: str = "idle") -> tuple[list[float], int]:
    from tui.app import make_app

    load = SyntheticLoad(rate, duration)
    load.start_clock()
    bridge = bridge_class(load.run, load.snapshot, FakeControl()).start()
    put_back = lower_ui_priority(priority) if bridge_class is ProcessBridge and priority != "normal" else (lambda: None)
    app = make_app(bridge, bridge.control, mode="live")
    frames = 0

    async def drive() -> None:
        nonlocal frames
        async with app.run_test(size=(160, 48), headless=True) as pilot:
            while not bridge.done:
                await pilot.pause(0.25)
                frames += 1

    try:
        asyncio.run(drive())
    finally:
        put_back()  # or the next runs' processes (forked from this one) would inherit it
    result = bridge.finish()
    # In a process the lateness list lives in the child: the run returns it.
    return (result if result is not None else load.lateness), frames


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200.0, help="sends per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    parser.add_argument("--repeat", type=int, default=3, help="headless / TUI pairs, alternating (medians are reported)")
    parser.add_argument("--ui-priority", choices=("idle", "nice", "normal"), default="idle",
                        help="the UI process's CPU priority (idle = SCHED_IDLE, run_tui's default; nice = +10)")
    parser.add_argument("--a-a", action="store_true",
                        help="noise floor: the 'TUI on' side is a second headless run (no UI at all)")
    parser.add_argument("--with-thread", action="store_true", help="also measure the UI with the run in a thread (not a process)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"rate {args.rate:g}/s, {args.duration:g} s per run, {args.repeat} pairs, UI priority {args.ui_priority}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load average {load:.2f} at start")
    print(f"{'':12} {'sends':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'mean ms':>8} {'UI frames':>9}")
    ratios50, ratios99 = [], []
    pooled: dict[str, list[float]] = {"headless": [], "TUI on": []}
    for rep in range(args.repeat):
        pair = {}
        # Alternate which goes first so a change in the machine's load hits both alike.
        order = ("headless", "TUI on") if rep % 2 == 0 else ("TUI on", "headless")
        for name in order:
            if name == "headless" or args.a_a:
                pair[name], frames = run_headless(args.rate, args.duration), ""
            else:
                pair[name], frames = run_with_ui(args.rate, args.duration, priority=args.ui_priority)
            p50, p99, worst = percentiles(pair[name])
            print(f"{name + f' #{rep + 1}':12} {len(pair[name]):7d} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {worst * 1e3:8.3f} "
                  f"{statistics.fmean(pair[name]) * 1e3:8.3f} {frames!s:>9}")
        for name in pooled:
            pooled[name] += pair[name]
        ratios50.append(percentiles(pair["TUI on"])[0] / max(percentiles(pair["headless"])[0], 1e-9))
        ratios99.append(percentiles(pair["TUI on"])[1] / max(percentiles(pair["headless"])[1], 1e-9))
    if args.with_thread:
        values, frames = run_with_ui(args.rate, args.duration, LiveBridge)
        p50, p99, worst = percentiles(values)
        print(f"{'TUI+thread':12} {len(values):7d} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {worst * 1e3:8.3f} "
              f"{statistics.fmean(values) * 1e3:8.3f} {frames:>9}")
    r50, r99 = statistics.median(ratios50), statistics.median(ratios99)
    for name, values in pooled.items():
        p50, p99, worst = percentiles(values)
        print(f"{name + ' all':12} {len(values):7d} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} {worst * 1e3:8.3f} "
              f"{statistics.fmean(values) * 1e3:8.3f}")
    pooled99 = percentiles(pooled["TUI on"])[1] / max(percentiles(pooled["headless"])[1], 1e-9)
    print(f"pooled p99 TUI on / headless: {pooled99:.2f}x")
    print(f"TUI on / headless, median of {args.repeat} pairs: p50 {r50:.2f}x, p99 {r99:.2f}x "
          f"(per pair p99: {', '.join(f'{r:.2f}' for r in ratios99)}); "
          f"{'within' if r99 <= 1.10 else 'outside'} the 10 % target; load average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
