"""Per-second costs of a live run's bookkeeping: parsing one ``/metrics`` page, and the
series snapshot the UI asks for on a long run.

    .venv/bin/python bench/bench_live_costs.py [--parses 200] [--hours 1] [--snapshots 10]

parse: ``parse_metrics`` on the real vLLM 0.32 capture under load (tests/data/), the page
the run scrapes once a second. snapshot: ``SeriesBuilder.snapshot()`` after ``--hours`` of
per-second ticks and scrapes and one request every ten seconds (the figures the tests used
to print; the tests now check what the snapshot holds instead).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rampwatch.core.timeline import RequestRecord, ServerSample, Tick
from rampwatch.loadgen.scrape import parse_metrics
from rampwatch.loadgen.series import SeriesBuilder

CAPTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm-0.32.0-cpu" / "metrics-under-load.txt"


def bench_parse(parses: int) -> None:
    text = CAPTURE.read_text()
    start = time.perf_counter()
    for _ in range(parses):
        parse_metrics(text, "u", 0.0)
    per_parse_ms = (time.perf_counter() - start) / parses * 1000
    print(f"parse_metrics on a {len(text.splitlines())}-line vLLM page: {per_parse_ms:.2f} ms")


def bench_snapshot(hours: float, snapshots: int) -> None:
    builder = SeriesBuilder()
    seconds = int(hours * 3600)
    start = time.perf_counter()
    for sec in range(seconds):
        builder.on_tick(Tick(t=float(sec), target_rps=10.0, state="holding", in_flight=5))
        builder.on_scrape(
            ServerSample(
                t=sec + 0.05,
                url="a",
                ok=True,
                backend="vllm",
                running=1.0,
                waiting=0.0,
                kv_usage=0.25,
                generation_tokens_total=100.0 * sec,
                prompt_tokens_total=1000.0 * sec,
                preemptions_total=0.0,
                created=1.0,
            )
        )
        if sec % 10 == 0:
            builder.on_request(
                RequestRecord(
                    id=sec // 10,
                    scheduled_at=sec,
                    sent_at=sec,
                    end_at=sec + 0.5,
                    first_token_at=sec + 0.1,
                    chunk_times=[sec + 0.3, sec + 0.5],
                    completion_tokens=4,
                    prompt_tokens=10,
                )
            )
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(snapshots):
        builder.snapshot()
    per_snapshot_ms = (time.perf_counter() - start) / snapshots * 1000
    print(f"{seconds} s of ticks+scrapes fed in {build_s:.2f} s; snapshot: {per_snapshot_ms:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parses", type=int, default=200)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--snapshots", type=int, default=10)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}")
    bench_parse(args.parses)
    bench_snapshot(args.hours, args.snapshots)


if __name__ == "__main__":
    main()
