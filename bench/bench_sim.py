"""Sustained streamed chunks per second the simulator serves on the `instant` preset.

The simulator runs in its own process (``python -m rampwatch.sim.cli``); this process is the client:
``--concurrency`` streams, each re-issuing a ``--max-tokens`` completion as soon as the
previous one ends, for ``--duration`` seconds after a short warm-up. It prints chunks/s
(SSE ``data:`` events carrying a token) and the simulator process's CPU use over the
same window (from /proc, 100% = one core).

    .venv/bin/python bench/bench_sim.py [--duration 10] [--concurrency 64] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def stream_worker(session, url, payload, stop_at, counts) -> None:
    while time.monotonic() < stop_at:
        async with session.post(url, json=payload) as resp:
            resp.raise_for_status()
            tail = b""
            async for data in resp.content.iter_any():
                data = tail + data
                # every event ends with a blank line; the usage chunk and [DONE] are not tokens
                counts["events"] += data.count(b"\n\n")
                tail = data[-1:] if data.endswith(b"\n") and not data.endswith(b"\n\n") else b""
        counts["requests"] += 1


async def measure(url: str, concurrency: int, max_tokens: int, warmup: float, duration: float, pid: int):
    payload = {"model": "tiny", "prompt": "bench " * 16, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    counts = {"events": 0, "requests": 0}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        stop_at = time.monotonic() + warmup + duration
        tasks = [
            asyncio.create_task(stream_worker(session, url + "/v1/completions", payload, stop_at, counts))
            for _ in range(concurrency)
        ]
        await asyncio.sleep(warmup)
        e0, r0, c0, t0 = counts["events"], counts["requests"], cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(duration)
        e1, r1, c1, t1 = counts["events"], counts["requests"], cpu_seconds(pid), time.monotonic()
        await asyncio.gather(*tasks)
    elapsed = t1 - t0
    requests = r1 - r0
    # Each finished request also sent one [DONE] event that is not a chunk.
    chunks = (e1 - e0) - requests
    return chunks / elapsed, requests / elapsed, (c1 - c0) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rampwatch.sim.cli",
            "--hardware",
            "instant",
            "--model",
            "tiny",
            "--port",
            "0",
            "--max-num-seqs",
            str(max(256, args.concurrency)),
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        banner = proc.stdout.readline()
        url = banner.split(" on ")[1].split(" ")[0]
        chunks_s, req_s, cpu = asyncio.run(
            measure(url, args.concurrency, args.max_tokens, args.warmup, args.duration, proc.pid)
        )
    finally:
        proc.terminate()
        proc.wait(10)
    print(
        f"simulator (instant/tiny): {chunks_s:,.0f} streamed chunks/s, {req_s:,.1f} requests/s, "
        f"simulator CPU {cpu * 100:.0f}% of one core "
        f"(concurrency {args.concurrency}, max_tokens {args.max_tokens}, {args.duration:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
