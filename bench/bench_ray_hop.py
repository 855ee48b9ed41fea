"""The Ray hop's cost per request: what sending a request through a Ray actor adds to the
controller (the process that runs the schedule and receives every record) and to a
request's time, without any HTTP in the way.

A local one-node cluster (``ray start --head`` from this venv, stopped at the end) hosts
one actor whose ``send`` returns at once a finished record of the size a real one has
(``--chunks`` chunk times: one per streamed chunk). The controller calls it as
``loadgen.run.ray_workers.RayPool`` does (``await actor.send.remote(...)``):

- one call at a time: the round trip (the latency the hop adds to a send, and to the
  record's return);
- ``--in-flight`` calls at a time, ``--requests`` in all: calls per second, and the
  controller's CPU per call (``time.process_time`` of this process: the controller's share;
  the actor's runs elsewhere, on a worker node in a real cluster).

Run: ``.venv/bin/python bench/bench_ray_hop.py`` (needs the ray extra).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ray

from rampwatch.core.timeline import RequestRecord
from rampwatch.loadgen.workload.requests import PreparedRequest

BIN = Path(sys.executable).parent


class EchoWorker:
    def __init__(self, chunks: int) -> None:
        self.chunks = chunks

    async def send(self, req: PreparedRequest, request_id: int, scheduled_at: float) -> RequestRecord:
        now = time.monotonic()
        return RequestRecord(
            id=request_id,
            scheduled_at=scheduled_at,
            sent_at=now,
            end_at=now,
            first_token_at=now,
            chunk_times=[now + i * 1e-3 for i in range(self.chunks)],
            prompt_tokens=req.expected_prompt_tokens,
            completion_tokens=self.chunks + 1,
            status=200,
        )


async def measure(actor, requests: int, in_flight: int) -> tuple[list[float], float, float]:
    messages = [{"role": "user", "content": "x" * 400}]
    req = PreparedRequest("chat", {"messages": messages, "max_completion_tokens": 200}, 100, 200)
    rtts = []
    for i in range(200):  # one at a time
        start = time.perf_counter()
        await actor.send.remote(req, i, 0.0)
        rtts.append(time.perf_counter() - start)
    semaphore = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with semaphore:
            await actor.send.remote(req, i, 0.0)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(requests)))
    return rtts, time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--in-flight", type=int, default=200)
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp_dir = tempfile.mkdtemp(prefix="rw-ray-bench-", dir="/tmp")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    start = [str(BIN / "ray"), "start", "--head", "--num-cpus", "1", "--port", str(port), "--temp-dir", temp_dir]
    subprocess.run([*start, "--include-dashboard=false"], check=True, capture_output=True, env=env)
    try:
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False)
        actor = ray.remote(EchoWorker).options(max_concurrency=100_000).remote(args.chunks)
        rtts, wall, cpu = asyncio.run(measure(actor, args.requests, args.in_flight))
        ray.shutdown()
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], capture_output=True, env=env)
        shutil.rmtree(temp_dir, ignore_errors=True)
    rtts.sort()
    print(f"record with {args.chunks} chunk times; {args.requests} calls, {args.in_flight} in flight")
    print(
        f"round trip, one at a time: p50 {statistics.median(rtts) * 1e3:.2f} ms, "
        f"p99 {rtts[int(len(rtts) * 0.99)] * 1e3:.2f} ms"
    )
    print(f"calls/s: {args.requests / wall:.0f}; controller CPU per call: {cpu / args.requests * 1e6:.0f} µs")


if __name__ == "__main__":
    main()
