"""Memory of the end of a headless run: the read-back of its recording (the exact summary,
figures by turn and by class, the result JSON's streamed per-request lists), without
running for an hour first.

    .venv/bin/python bench/bench_readback_rss.py [--requests 360000] [--rate 100]
        [--output-tokens 100] [--keep PATH] [--reuse] [--tracemalloc]

Writes a recording of ``--requests`` requests at a constant ``--rate`` with the real
``RecordingWriter`` (its seek checkpoints included), shaped like a real run's: every
answer ``--output-tokens`` chunks ~10 ms apart with the client's jitter, one tick a
second, one scrape a second of the embedded simulator's ``/metrics`` page as
``loadgen.server.scrape`` parses it (its ~140 raw series). Then, in a fresh process so that its
peak RSS is its own, reads it back with the calls ``app.session.final_figures`` and
``finish_run`` make (``summarise``, ``recording_turns``, ``class_figures``,
``write_bench_result``) and prints the peak RSS after each, with the heap and mapped-file
parts of the RSS at that moment. ``--tracemalloc`` also prints the Python heap's peak and
what it still holds at the end, by line (slower, and counted in the RSS).
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

URL = "http://127.0.0.1:8000/metrics"
MODEL = "llama-3.1-8b-fp8"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_parts_mb() -> str:
    """The resident set now, split into the heap (anonymous) and mapped files (the
    recording's mmap'd pages count here)."""
    try:
        with open("/proc/self/status") as f:
            parts = dict(line.split(":", 1) for line in f if line.startswith(("RssAnon", "RssFile")))
    except OSError:
        return ""
    return f"now anon {int(parts['RssAnon'].split()[0]) / 1024:6.1f} MB, file {int(parts['RssFile'].split()[0]) / 1024:5.1f} MB"


def scrape_template():
    """One scrape of the embedded simulator's metrics page, parsed as a run parses it."""
    from rampwatch.loadgen.server.scrape import parse_metrics
    from rampwatch.sim.config import SimConfig
    from rampwatch.sim.engine import Engine
    from rampwatch.sim.metrics import make_registry, render

    return parse_metrics(render(make_registry([Engine(SimConfig())], MODEL)).decode(), URL, 0.0)


def write(path: Path, requests: int, rate: float, output_tokens: int) -> None:
    from rampwatch.core.timeline import Event, RequestRecord, RunHeader, Tick
    from rampwatch.record.writer import RecordingWriter

    rng = np.random.default_rng(0)
    template = scrape_template()
    header = RunHeader(
        rampwatch_version="0.1.0",
        started_at_unix=1_795_000_000.0,
        target="http://127.0.0.1:8000",
        model=MODEL,
        scenario_name="soak",
        scenario={"name": "soak", "schedule": {"kind": "constant", "rate": rate}},
        options={"target": "http://127.0.0.1:8000", "record": True},
        planned_duration_s=requests / rate,
        metrics_urls=[URL],
    )
    writer = RecordingWriter(path, flush_interval_s=None)
    writer.on_start(header)
    writer.on_event(Event(0.0, "start", "run started"))
    started = time.perf_counter()
    sent = 0
    second = 0
    generated = 0.0
    while sent < requests:
        t = float(second)
        n = min(int(rate), requests - sent)
        writer.on_tick(Tick(t, rate, "ramping", in_flight=int(rate), offered_total=sent, sent_total=sent))
        generated += n * output_tokens
        # Counters grow, gauges move: every value differs from the last scrape's, as in a run.
        raw = {key: value + second * (1 + i % 7) for i, (key, value) in enumerate(template.raw.items())}
        writer.on_scrape(
            dataclasses.replace(template, t=t + 0.2, running=float(n), generation_tokens_total=generated, raw=raw)
        )
        sent_at = t + np.arange(n) / rate + rng.exponential(0.0002, n)
        first = sent_at + 0.02 + rng.exponential(0.005, n)
        gaps = 0.010 + rng.exponential(0.0005, (n, output_tokens - 1))
        chunks = first[:, None] + np.cumsum(gaps, axis=1)
        for i in range(n):
            if i == n // 2:  # a run's writer flushes every 0.5 s
                writer.flush()
            writer.on_request(
                RequestRecord(
                    id=sent + i,
                    scheduled_at=t + i / rate,
                    sent_at=float(sent_at[i]),
                    end_at=float(chunks[i, -1]) + 0.0005,
                    first_token_at=float(first[i]),
                    chunk_times=chunks[i].tolist(),
                    prompt_tokens=32,
                    completion_tokens=output_tokens,
                    tokens_from_usage=True,
                    finish_reason="length",
                    status=200,
                )
            )
        writer.flush()
        sent += n
        second += 1
    writer.on_event(Event(float(second + 2), "stop", "run finished"))
    writer.on_finish(float(second + 2))
    print(
        f"recording: {sent:,} requests, {second:,} s at {rate:g} req/s, {output_tokens} tokens each, "
        f"{path.stat().st_size / 1e6:.1f} MB, written in {time.perf_counter() - started:.1f} s"
    )


def read_back(path: Path, trace: bool) -> None:
    """What the end of a run does with its recording (``app.session.final_figures``, then
    ``finish_run``'s result JSON), each step's peak RSS as it goes."""
    if trace:
        import tracemalloc

        tracemalloc.start(1)
    from rampwatch.record.analysis import class_figures, recording_turns, summarise
    from rampwatch.record.reader import open_recording
    from rampwatch.record.result_json import write_bench_result

    def step(name: str, started: float) -> None:
        elapsed = time.perf_counter() - started
        print(f"  {name:<20} peak RSS {peak_rss_mb():6.1f} MB  {rss_parts_mb()}  ({elapsed:.1f} s)", flush=True)

    print(f"  {'(imports)':<20} peak RSS {peak_rss_mb():6.1f} MB  {rss_parts_mb()}")
    t = time.perf_counter()
    recording = open_recording(path)
    step("open_recording", t)
    t = time.perf_counter()
    summary = summarise(recording)
    step("summarise", t)
    t = time.perf_counter()
    recording_turns(recording)
    step("recording_turns", t)
    t = time.perf_counter()
    class_figures(recording)
    step("class_figures", t)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        write_bench_result(recording, summary, Path(tmp) / "result.json")
    step("write_bench_result", t)
    if trace:
        import tracemalloc

        current, peak = tracemalloc.get_traced_memory()
        print(
            f"  Python heap: {current / 1e6:.1f} MB held at the end, {peak / 1e6:.1f} MB at its peak; largest holders now:"
        )
        for stat in tracemalloc.take_snapshot().statistics("lineno")[:8]:
            print(f"    {stat.size / 1e6:7.1f} MB  {stat.count:>9,} blocks  {stat.traceback}")
    recording.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=360_000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--keep", default=None, help="write the recording here (default: a temporary file)")
    parser.add_argument("--reuse", action="store_true", help="read back an existing --keep file, write nothing")
    parser.add_argument("--tracemalloc", action="store_true", help="also show what the Python heap holds")
    parser.add_argument("--read-back", default=None, help=argparse.SUPPRESS)  # the fresh process's own step
    args = parser.parse_args()
    if args.read_back is not None:
        read_back(Path(args.read_back), args.tracemalloc)
        return 0
    with tempfile.TemporaryDirectory(prefix="rampwatch-readback-") as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "soak.rwrec"
        if not args.reuse:
            write(path, args.requests, args.rate, args.output_tokens)
        print(f"read-back of {path} in a fresh process:", flush=True)
        command = [sys.executable, __file__, "--read-back", str(path)]
        return subprocess.run(command + (["--tracemalloc"] if args.tracemalloc else [])).returncode


if __name__ == "__main__":
    sys.exit(main())
