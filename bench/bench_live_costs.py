"""Costs of a live run's bookkeeping on the run's event loop: parsing one ``/metrics``
page, the series snapshot the UI asks for on a long run, and what each finished request
costs the series builder.

    .venv/bin/python bench/bench_live_costs.py [--parses 200] [--hours 1] [--snapshots 10]
        [--rps 75] [--seconds 60] [--chunks 256]

parse: ``parse_metrics`` on the real vLLM 0.32 capture under load (tests/data/), the page
the run scrapes once a second. snapshot: ``SeriesBuilder.snapshot()`` after ``--hours`` of
per-second ticks and scrapes and one request every ten seconds (the figures the tests used
to print; the tests now check what the snapshot holds instead).

requests: the stream a paced run of ``--rps`` requests a second gives the builder, as
``Run`` feeds it (records in order of completion, a tick every second followed by the
knee detector's ``take_completed_seconds``), each request with ``--chunks`` token chunks
4–6 ms apart. Every ``on_request`` call and every tick is timed on its own: their sum over
the records is the builder's whole per-request cost, the largest calls are the longest
pauses it puts on the event loop between two socket reads. ``--fold-at`` overrides how many
queued records the builder folds in at once; ``--wave N`` makes requests end N at a time, as
in a capped run whose streams started in the same engine step, and adds the time their
``on_request`` calls take back to back. ``--classes N`` makes the stream a mixture of N
classes (round robin), each with its own series builder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from rampwatch.core.figures import series
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import RequestRecord, RunHeader, ServerSample, Tick
from rampwatch.loadgen.server.scrape import parse_metrics

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


def paced_records(rps: float, seconds: int, chunks: int, wave: int = 1, seed: int = 0) -> list[RequestRecord]:
    """Requests sent ``rps`` a second, each with a first token ~30 ms after the send and
    ``chunks - 1`` later chunks 4–6 ms apart, in the order they finish. ``wave`` > 1 sends
    them in groups that share their engine steps, so each group ends at one instant."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(int(rps * seconds)):
        if i % wave == 0:
            sent = i / rps
            first = sent + float(rng.uniform(0.02, 0.04))
            times = first + np.cumsum(rng.uniform(0.004, 0.006, chunks - 1))
        records.append(
            RequestRecord(
                id=i,
                scheduled_at=sent,
                sent_at=sent,
                end_at=float(times[-1]),
                first_token_at=first,
                chunk_times=times.tolist(),  # a list, as the client builds it
                prompt_tokens=32,
                completion_tokens=chunks,
            )
        )
    return sorted(records, key=lambda r: r.end_at)


def mixed_header(classes: int) -> RunHeader:
    """A run whose scenario is a mixture of ``classes`` classes (``workload.mix``)."""
    mix = [{"name": f"class{i}", "weight": 1.0, "slo": {"ttft_ms": 100.0}} for i in range(classes)]
    return RunHeader("bench", 0.0, "http://bench", "m", "mixed", {"workload": {"mix": mix}}, {})


def bench_requests(rps: float, seconds: int, chunks: int, wave: int, classes: int = 0) -> None:
    records = paced_records(rps, seconds, chunks, wave)
    builder = SeriesBuilder()
    if classes:  # a mixture: every request also feeds its class's series (round robin)
        builder.on_start(mixed_header(classes))
        for record in records:
            record.request_class = f"class{record.id % classes}"
    calls_us: list[float] = []
    ticks_us: list[float] = []
    next_tick = 1
    clock = time.perf_counter_ns
    for record in records:
        while record.end_at >= next_tick:
            t0 = clock()
            builder.on_tick(Tick(t=float(next_tick), target_rps=rps, state="holding", in_flight=100))
            builder.take_completed_seconds()
            ticks_us.append((clock() - t0) / 1000)
            next_tick += 1
        t0 = clock()
        builder.on_request(record)
        calls_us.append((clock() - t0) / 1000)
    ordered = sorted(calls_us)
    print(
        f"on_request, {len(records)} records of {chunks} chunks at {rps:g}/s: builder time per request "
        f"{(sum(calls_us) + sum(ticks_us)) / len(records):.1f} µs with the ticks, "
        f"{statistics.fmean(calls_us):.1f} µs in on_request; per call p50 {ordered[len(ordered) // 2]:.1f} µs, "
        f"p99 {ordered[int(0.99 * (len(ordered) - 1))]:.1f} µs, max {ordered[-1] / 1000:.2f} ms; "
        f"{sum(1 for c in calls_us if c > 100)} calls over 0.1 ms, {sum(1 for c in calls_us if c > 500)} over 0.5 ms"
    )
    print(
        f"tick + take_completed_seconds, {len(ticks_us)} seconds: median {statistics.median(ticks_us) / 1000:.2f} ms, "
        f"max {max(ticks_us) / 1000:.2f} ms"
    )
    if wave > 1:
        # the requests of a wave end together: the loop runs their on_request calls back to back
        per_wave = [sum(calls_us[i : i + wave]) / 1000 for i in range(0, len(calls_us), wave)]
        print(
            f"waves of {wave} requests ending together, {len(per_wave)} waves: their on_request calls take "
            f"median {statistics.median(per_wave):.2f} ms, max {max(per_wave):.2f} ms back to back"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parses", type=int, default=200)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--snapshots", type=int, default=10)
    parser.add_argument("--rps", type=float, default=75.0, help="finished requests per second in the requests step")
    parser.add_argument("--seconds", type=int, default=60, help="length of the requests step's stream")
    parser.add_argument("--chunks", type=int, default=256, help="token chunks per request (first token included)")
    parser.add_argument(
        "--wave",
        type=int,
        default=1,
        help="requests that finish at the same instant (a capped run whose streams started together)",
    )
    parser.add_argument("--only-requests", action="store_true", help="run the requests step only")
    parser.add_argument("--classes", type=int, default=0, help="requests step: a mixture of this many classes")
    parser.add_argument(
        "--fold-at", type=int, help="queued records the builder folds in at once (default: series.FOLD_AT_QUEUED)"
    )
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}")
    if args.fold_at is not None:
        series.FOLD_AT_QUEUED = args.fold_at
    if not args.only_requests:
        bench_parse(args.parses)
        bench_snapshot(args.hours, args.snapshots)
    bench_requests(args.rps, args.seconds, args.chunks, args.wave, args.classes)


if __name__ == "__main__":
    main()
