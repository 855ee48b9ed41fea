"""What holds the run's event loop: every callback the loop runs, timed, by name.

    .venv/bin/python bench/bench_loop_stalls.py                    # headless and live
    .venv/bin/python bench/bench_loop_stalls.py --mode headless --rate 150 --duration 30

A real `rampwatch run random` (built as `rampwatch run` builds it) against the simulator
(`rampwatch sim` in its own process, a simulated H100 slowed to ``--sim-speed`` × real
time so that each answer stays open for seconds: ~1,500 streams in flight at 150 req/s),
on the standard asyncio loop (``RAMPWATCH_EVENT_LOOP=asyncio``: uvloop's callbacks cannot
be timed one by one). ``asyncio.events.Handle._run`` is wrapped: each callback is timed
with ``perf_counter`` and counted under its name — a Task's step under its coroutine's
qualname and the innermost coroutine it resumed (``outer < inner``), any other callback
under its own qualname. The wrapper costs ~1 µs a callback; it is in every figure alike.

- ``headless``: `rampwatch run --headless` in this process (``app.cli.main``).
- ``live``: the live path's run process: the run forked by ``app.bridge.ProcessBridge``
  exactly as the live UI does (its snapshot publisher on the run's loop), the UI side
  only reading the snapshots (no Textual screen); the child's table comes back in a file.

Per mode it prints the callbacks that took over 1 ms at least once, sorted by their time
over 1 ms: count, total ms, max ms, count over 1 ms; the recording writer thread's
flushes (wall and thread-CPU time: pure-Python work there holds the GIL, so the loop
waits for it up to ``sys.getswitchinterval()`` at a time); and the run's send lateness.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import io
import json
import os
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ["RAMPWATCH_EVENT_LOOP"] = "asyncio"  # before rampwatch chooses its loop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_client import TINY_MODEL  # noqa: E402

SLOW_S = 0.001


class LoopProfile:
    """Per callback name: [count, total s, max s, count over SLOW_S, total over SLOW_S]."""

    def __init__(self, cprofile: str | None = None) -> None:
        self.cprofile = cprofile  # a callback name to profile function by function
        self.profiler = cProfile.Profile()
        self.stats: dict[str, list[float]] = {}
        self.flushes: list[tuple[float, float, float]] = []  # the recorder's (start, wall s, thread-CPU s)
        self.slow: list[tuple[float, float]] = []  # (start, end) of each callback over SLOW_S
        self._original: Any = None

    def install(self) -> None:
        original = self._original = asyncio.events.Handle._run
        stats, slow = self.stats, self.slow
        clock = time.perf_counter
        profiled, profiler = self.cprofile, self.profiler

        def timed_run(handle: asyncio.events.Handle) -> None:
            name = callback_name(handle._callback)  # type: ignore[attr-defined]
            if name == profiled:
                profiler.enable()
            start = clock()
            try:
                original(handle)
            finally:
                took = clock() - start
                if name == profiled:
                    profiler.disable()
                row = stats.get(name)
                if row is None:
                    row = stats[name] = [0, 0.0, 0.0, 0, 0.0]
                row[0] += 1
                row[1] += took
                if took > row[2]:
                    row[2] = took
                if took > SLOW_S:
                    row[3] += 1
                    row[4] += took
                    slow.append((start, start + took))

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

        from rampwatch.record.writer import RecordingWriter

        flush = RecordingWriter.flush
        flushes = self.flushes

        def timed_flush(writer: RecordingWriter) -> None:
            wall, cpu = time.perf_counter(), time.thread_time()
            flush(writer)
            flushes.append((wall, time.perf_counter() - wall, time.thread_time() - cpu))

        RecordingWriter.flush = timed_flush  # type: ignore[method-assign]

    def reset(self) -> None:
        self.stats.clear()
        self.flushes.clear()
        self.slow.clear()

    def to_dict(self) -> dict[str, Any]:
        return {"stats": self.stats, "flushes": self.flushes, "slow": self.slow}


@functools.cache
def _package_dir() -> str:
    import rampwatch.loadgen

    return str(Path(rampwatch.loadgen.__file__).resolve().parent.parent)


def _ours(coro: Any) -> bool:
    """Whether ``coro`` is rampwatch's (wherever the package is imported from)."""
    code = getattr(coro, "cr_code", None)
    return code is not None and code.co_filename.startswith(_package_dir())


PROFILE = LoopProfile()


def callback_name(callback: Any) -> str:
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):  # a step or wake-up of a task: name its coroutines
        chain = [task.get_coro()]
        while hasattr(chain[-1], "cr_await") and hasattr(chain[-1].cr_await, "cr_await"):
            chain.append(chain[-1].cr_await)
        names = [getattr(c, "__qualname__", type(c).__name__) for c in chain]
        # the task's coroutine < the deepest of rampwatch's < the innermost one it resumes
        ours = [n for c, n in zip(chain, names) if _ours(c)]
        picked = [names[0]] + ([ours[-1]] if ours else []) + [names[-1]]
        return " < ".join(dict.fromkeys(picked))
    return getattr(callback, "__qualname__", None) or type(callback).__qualname__


def table(stats: dict[str, list[float]], top: int) -> str:
    rows = sorted(stats.items(), key=lambda kv: -kv[1][4])
    slow = [(n, r) for n, r in rows if r[3]][:top]
    total_over = sum(r[4] for r in stats.values())
    lines = [
        f"{'callback':78s} {'count':>8s} {'total ms':>9s} {'max ms':>8s} {'>1ms':>6s} {'ms >1ms':>8s}",
    ]
    for name, (count, total, mx, over, over_t) in slow:
        lines.append(
            f"{name[:78]:78s} {count:8.0f} {total * 1000:9.1f} {mx * 1000:8.1f} {over:6.0f} {over_t * 1000:8.1f}"
        )
    all_count = sum(r[0] for r in stats.values())
    all_total = sum(r[1] for r in stats.values())
    all_over = sum(r[3] for r in stats.values())
    lines.append(
        f"{'(all callbacks)':78s} {all_count:8.0f} {all_total * 1000:9.1f} "
        f"{max((r[2] for r in stats.values()), default=0) * 1000:8.1f} {all_over:6.0f} {total_over * 1000:8.1f}"
    )
    return "\n".join(lines)


def flush_line(flushes: list[tuple[float, float, float]], slow: list[tuple[float, float]]) -> str:
    """The recorder thread's flushes, and the slow callbacks that overlapped one: the
    thread's pure-Python work holds the GIL, which the loop's thread then waits for."""
    if not flushes:
        return "recorder flushes: none"
    walls = sorted(w for _, w, _ in flushes)
    spans = sorted((start, start + wall) for start, wall, _ in flushes)
    overlapping = [(a, b) for a, b in slow if any(start < b and a < end for start, end in spans)]
    return (
        f"recorder thread: {len(flushes)} flushes, wall total {sum(walls) * 1000:.0f} ms, "
        f"p50 {walls[len(walls) // 2] * 1000:.1f} ms, max {walls[-1] * 1000:.1f} ms; "
        f"thread CPU total {sum(c for _, _, c in flushes) * 1000:.0f} ms; "
        f"callbacks over 1 ms during a flush: {len(overlapping)} of {len(slow)} "
        f"({sum(b - a for a, b in overlapping) * 1000:.0f} ms)"
    )


def run_args(url: str, args: argparse.Namespace, out: Path) -> list[str]:
    return [
        "run",
        "random",
        "--headless",
        "--target",
        url,
        "--model",
        "tiny",
        "--tokenizer",
        str(TINY_MODEL),
        "--progress-interval",
        "5",
        "--result-json",
        str(out.with_suffix(".json")),
        "--record",
        str(out.with_suffix(".rwrec")),
        "--max-error-rate",
        "1",
        "--set",
        f"workload.input_tokens={args.input_tokens}",
        "--set",
        f"workload.output_tokens={args.output_tokens}",
        "--set",
        f"schedule={{kind: constant, rate: {args.rate:g}, duration_s: {args.duration:g}}}",
    ]


def lateness_line(recording_path: Path) -> str:
    from rampwatch.record.reader import open_recording

    recording = open_recording(recording_path)
    records = recording.requests
    peak = max((t.in_flight for t in recording.ticks), default=0)
    recording.close()
    late = sorted(r.sent_at - r.scheduled_at for r in records)

    def q(x: float) -> float:
        return late[min(len(late) - 1, int(x * len(late)))] * 1000

    ok = sum(1 for r in records if r.ok)
    return (
        f"{len(records)} requests ({ok} ok), peak in flight {peak}; send lateness p50 {q(0.5):.2f} ms, "
        f"p99 {q(0.99):.2f} ms, max {late[-1] * 1000:.2f} ms"
    )


def run_headless(url: str, args: argparse.Namespace, tmp: Path, profile: LoopProfile) -> None:
    from rampwatch.app.cli import main

    out = tmp / "headless"
    profile.reset()
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(run_args(url, args, out))
    report("headless (rampwatch run --headless, in this process)", code, profile.to_dict(), out, args)


def run_live(url: str, args: argparse.Namespace, tmp: Path, profile: LoopProfile) -> None:
    from rampwatch.app import bridge as bridge_module
    from rampwatch.app.cli import build_parser
    from rampwatch.app.live import start_live_prepared
    from rampwatch.app.run_config import RunConfig
    from rampwatch.app.session import build_run, plan_run

    out = tmp / "live"
    parser, _ = build_parser()
    prepared = build_run(plan_run(RunConfig.from_cli_args(parser.parse_args(run_args(url, args, out)))))
    stats_path = tmp / "live-stats.json"
    child_main = bridge_module._child_main

    def profiled_child(*child_args: Any) -> None:
        profile.reset()  # the child's own loop only
        try:
            child_main(*child_args)
        finally:
            stats_path.write_text(json.dumps(profile.to_dict()))

    bridge_module._child_main = profiled_child  # type: ignore[assignment]
    try:
        # The live screen's run process, as `rampwatch run` starts it; its app is built,
        # not run (the screen's drawing is the other process's and costs the run nothing).
        bridge, _app = start_live_prepared(prepared, log_path=str(tmp / "live-run.log"))
        bridge.join()
        result = bridge.finish()
    finally:
        bridge_module._child_main = child_main  # type: ignore[assignment]
    report(
        f"live (the forked run process, snapshots published every {bridge_module.PUBLISH_INTERVAL_S * 1000:.0f} ms)",
        0 if result is not None else 1,
        json.loads(stats_path.read_text()),
        out,
        args,
    )


def report(title: str, code: int, data: dict[str, Any], out: Path, args: argparse.Namespace) -> None:
    print(f"\n== {title}: exit {code}, load average {load_average()}")
    print(lateness_line(out.with_suffix(".rwrec")))
    print(flush_line([tuple(f) for f in data["flushes"]], [tuple(x) for x in data["slow"]]))  # type: ignore[misc]
    print(table(data["stats"], args.top), flush=True)
    if args.cprofile and "live" not in title:
        pstats.Stats(PROFILE.profiler).sort_stats("cumulative").print_stats(args.top * 2)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["both", "headless", "live"], default="both")
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second")
    parser.add_argument("--duration", type=float, default=20.0, help="the schedule's seconds")
    parser.add_argument("--input-tokens", type=int, default=256)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--sim-speed", type=float, default=0.02, help="simulated seconds per wall second")
    parser.add_argument("--top", type=int, default=15, help="rows per table")
    parser.add_argument("--cprofile", metavar="NAME", help="profile this callback's functions (headless)")
    args = parser.parse_args()
    if not TINY_MODEL.exists():
        raise SystemExit(f"missing {TINY_MODEL}: run `bash scripts/setup_vllm.sh`")

    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    profile = PROFILE
    profile.cprofile = args.cprofile
    profile.install()
    print(
        f"{os.cpu_count()} CPUs, load average {load_average()}; {args.rate:g} req/s for {args.duration:g} s, "
        f"random {args.input_tokens}→{args.output_tokens} tokens, simulated H100 at {args.sim_speed:g}× real time; "
        f"asyncio loop, switch interval {sys.getswitchinterval() * 1000:g} ms, threads {threading.active_count()}"
    )
    config = SimConfig(hardware="h100", model="tiny", max_num_seqs=8192, speed=args.sim_speed)
    with tempfile.TemporaryDirectory(prefix="rw-loop-stalls-") as tmp, serving_sim(config) as sim:
        if args.mode in ("both", "headless"):
            run_headless(sim.url, args, Path(tmp), profile)
        if args.mode in ("both", "live"):
            run_live(sim.url, args, Path(tmp), profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
