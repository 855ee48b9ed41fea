"""Trace replay costs: reading a large trace, and building its requests.

    .venv/bin/python bench/bench_traces.py [--rows 1000000] [--requests 2000]

Writes a Mooncake-style trace of ``--rows`` rows (1–29 hash ids each, as many blocks as
the row's length) to a temporary file, then reports how long ``load_trace`` takes and
the memory it holds (the columns' bytes and the process's peak RSS), and the time to
build one request (prompt synthesis on the simulator's tokenizer) for a trace row
against the shipped ``chat`` and ``random`` scenarios.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.tokenizers import load_tokenizer
from rampwatch.loadgen.workload.trace_replay import TraceRequests
from rampwatch.loadgen.workload.traces import load_trace


def write_trace(path: Path, rows: int, seed: int = 0) -> None:
    """Rows 3 ms apart; a row shares its first blocks with a few popular prefixes and the
    rest of its blocks are its own, about as in the Mooncake traces."""
    rng = np.random.default_rng(seed)
    next_id = 1000
    with path.open("wb") as fh:
        for i in range(rows):
            blocks = int(rng.integers(1, 30))
            shared = min(blocks, int(rng.integers(0, 12)))
            ids = list(range(shared)) + list(range(next_id, next_id + blocks - shared))
            next_id += blocks - shared
            row = {"timestamp": 3 * i, "input_length": blocks * 512 - int(rng.integers(1, 512)), "output_length": 200}
            fh.write(orjson.dumps({**row, "hash_ids": ids}) + b"\n")


def per_request_ms(build, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        build()
    return (time.perf_counter() - start) / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        write_trace(path, args.rows)
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        trace = load_trace(path, "mooncake")
        took = time.perf_counter() - start
        rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        size = path.stat().st_size
    print(f"trace: {len(trace):,} rows, {len(trace.hash_ids):,} hash ids, file {size / 1e6:.0f} MB")
    print(
        f"load_trace: {took:.2f} s, columns {trace.nbytes / 1e6:.0f} MB, peak RSS +{(rss_after - rss_before) / 1e3:.0f} MB"
    )
    tokenizer = load_tokenizer(None)
    rows = TraceRequests(trace, 512, "completions", False, 0, tokenizer)
    index = iter(range(len(trace)))
    mean_in = float(trace.input_tokens[: args.requests].mean())
    print(
        f"trace row ({mean_in:,.0f} tokens in): {per_request_ms(lambda: rows.row(next(index)), args.requests):.2f} ms"
    )
    for name in ("chat", "random"):
        factory = RequestFactory(load_scenario(name), tokenizer)
        print(f"{name} scenario request: {per_request_ms(factory.next_request, args.requests):.2f} ms")


if __name__ == "__main__":
    main()
