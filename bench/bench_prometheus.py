"""What `--prometheus-port` costs the run: the sink's calls on the run's loop, a scrape's
rendering (on the server's thread, but under the GIL the loop shares), and a headless
run with and without it.

    .venv/bin/python bench/bench_prometheus.py                      # both parts
    .venv/bin/python bench/bench_prometheus.py --part calls
    .venv/bin/python bench/bench_prometheus.py --part run --rate 50 --duration 20 --rounds 2

``calls``: ``PrometheusTarget.on_request`` per record (ok records with 16 and 256 chunk
gaps: one bisect per gap), ``on_tick`` with a second's loop-lag histogram, and a whole
scrape rendered (``generate_latest``) after 100,000 records in 4 classes. CPU time
(``time.thread_time``), medians of 5.

``run``: `rampwatch run random --headless` (a child process) against the embedded
simulator (``instant`` hardware, ``tiny`` model, 64 output tokens), a constant ``--rate``
for ``--duration`` seconds, off and on in turn (``--rounds`` of each, alternating); with
it on, this process scrapes the run every second, as Prometheus would at a fast
interval. Prints the run's CPU (user + system, from the child's rusage), its send
lateness p99 and its loop lag p99 (the result JSON's). Figures only: nothing asserts a
timing; on a shared machine read the rounds side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client import generate_latest

from rampwatch.core.timeline import RequestRecord, Tick
from rampwatch.loadgen.run.prometheus_target import PrometheusTarget


def record(i: int, chunks: int, request_class: str | None = None) -> RequestRecord:
    return RequestRecord(
        id=i, scheduled_at=0.0, sent_at=0.0001, end_at=1.0, first_token_at=0.05,
        chunk_times=[0.05 + 0.01 * k for k in range(1, chunks + 1)], prompt_tokens=100,
        completion_tokens=chunks + 1, request_class=request_class,
    )  # fmt: skip


def per_call_us(call, items: list, repeats: int = 5) -> float:
    runs = []
    for _ in range(repeats):
        start = time.thread_time()
        for item in items:
            call(item)
        runs.append((time.thread_time() - start) / len(items) * 1e6)
    return statistics.median(runs)


def part_calls() -> None:
    target = PrometheusTarget(0)
    for chunks in (16, 256):
        records = [record(i, chunks) for i in range(2000)]
        print(f"on_request, {chunks:>3} chunk gaps: {per_call_us(target.on_request, records):8.2f} µs CPU")
    lag = [[b, 3] for b in range(0, 120, 2)]  # a second's samples over 60 buckets
    ticks = [Tick(t=float(i), target_rps=10.0, state="ramping", offered_total=i, sent_total=i, loop_lag=lag,
                  loop_lag_max_ms=2.0) for i in range(2000)]  # fmt: skip
    print(f"on_tick, 60 lag buckets:      {per_call_us(target.on_tick, ticks):8.2f} µs CPU")
    big = PrometheusTarget(0)
    for i in range(100_000):
        big.on_request(record(i, 16, f"class-{i % 4}"))
    renders = []
    for _ in range(5):
        start = time.thread_time()
        generate_latest(big.registry)
        renders.append((time.thread_time() - start) * 1e3)
    size = len(generate_latest(big.registry))
    print(f"a scrape rendered (4 classes): {statistics.median(renders):8.2f} ms CPU, {size:,} bytes")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_run(rate: float, duration: float, prometheus: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        argv = [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", "--no-record",
                "--sim-hardware", "instant", "--sim-model", "tiny", "--duration", str(duration),
                "--start-rps", str(rate), "--end-rps", str(rate), "--set", "workload.output_tokens=64",
                "--result-json", str(result), "--progress-interval", "3600"]  # fmt: skip
        port = free_port() if prometheus else None
        if port is not None:
            argv += ["--prometheus-port", str(port), "--prometheus-linger", "0"]  # the run's cost alone
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        scrapes, done = [0], threading.Event()

        def scrape() -> None:
            while not done.wait(1.0):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                        answer.read()
                    scrapes[0] += 1
                except OSError:
                    pass

        scraper = threading.Thread(target=scrape, daemon=True) if port is not None else None
        if scraper is not None:
            scraper.start()
        _, err = child.communicate()
        done.set()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if child.returncode != 0:
            raise SystemExit(f"the run failed ({child.returncode}): {err.strip().splitlines()[-1:]}")
        figures = json.loads(result.read_text())
    client = figures.get("rampwatch_client") or {}
    return {
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "lateness_p99_ms": (figures.get("rampwatch_send_lateness_ms") or {}).get("p99"),
        "loop_lag_p99_ms": client.get("loop_lag_p99_ms"),
        "completed": figures.get("completed"),
        "scrapes": scrapes[0],
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def part_run(rate: float, duration: float, rounds: int) -> None:
    print(f"headless run, {rate:g} req/s for {duration:g} s, instant simulator (its process's CPU included)")
    for r in range(rounds):
        for prometheus in (False, True) if r % 2 == 0 else (True, False):
            got = one_run(rate, duration, prometheus)
            label = "on " if prometheus else "off"
            print(
                f"  round {r + 1} {label}: CPU {got['cpu_s']:6.2f} s, completed {got['completed']}, "
                f"send lateness p99 {_ms(got['lateness_p99_ms'])} ms, loop lag p99 {_ms(got['loop_lag_p99_ms'])} ms, "
                f"scrapes {got['scrapes']}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("calls", "run", "all"), default="all")
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs")
    if args.part in ("calls", "all"):
        part_calls()
    if args.part in ("run", "all"):
        part_run(args.rate, args.duration, args.rounds)


if __name__ == "__main__":
    main()
