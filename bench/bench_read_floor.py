"""The floor under the client's CPU per streamed token: what reading the stream costs
before any of rampwatch's own work, per event loop and read size.

Against the simulator in its own process, 100 keep-alive connections each re-issue the
same 256-token streamed completion until ``--requests`` are done. Measured in this
process over the run after a warm-up (``getrusage(RUSAGE_SELF)``), per 1M streamed
events (one token per event):

- ``trivial protocol``: an ``asyncio.Protocol`` whose ``data_received`` only counts
  ``data: {`` and appends one timestamp per event, i.e. the event loop, the socket reads
  and nothing else. With asyncio's default read size (a fresh 256 KiB bytes object per
  recv), with reads capped at 64 KiB (what ``loadgen.transport.http_stream`` sets), and on uvloop.
- ``StreamingClient``: rampwatch's client (``loadgen.transport.client``, ``http_stream`` transport)
  sending the same request in a loop, with no runner, workload or summary around it;
  ``--endpoint chat`` sends it as a chat request instead.

``--target URL`` measures against a server already running instead of starting the
simulator, e.g. ``rampwatch sim --reasoning-parser r1 --reasoning-tokens 128`` for a
reasoning model's streams (thinking chunks, then the answer), and lets two checkouts'
clients (each with its own ``.venv``) read the same server; ``--client-only`` skips the
trivial protocol's rows.

    .venv/bin/python bench/bench_read_floor.py [--requests 2000] [--sim-hardware instant]
        [--target URL] [--endpoint chat] [--client-only]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONCURRENCY = 100
OUTPUT_TOKENS = 256
WARMUP_EVENTS = 200 * OUTPUT_TOKENS
BODY = json.dumps(
    {
        "model": "tiny",
        "prompt": "hello " * 32,
        "max_tokens": OUTPUT_TOKENS,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
).encode()
REQUEST = (
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(BODY)
) + BODY


class Meter:
    """CPU and events from the end of the warm-up to the end of the run."""

    def __init__(self, total_requests: int) -> None:
        self.total_requests = total_requests
        self.sent = self.done = self.events = self.reads = 0
        self.start: tuple[resource.struct_rusage, int, int, float] | None = None
        self.finished = asyncio.get_running_loop().create_future()

    def add(self, events: int, reads: int) -> None:
        self.events += events
        self.reads += reads
        if self.start is None and self.events >= WARMUP_EVENTS:
            self.start = (resource.getrusage(resource.RUSAGE_SELF), self.events, self.reads, time.monotonic())

    def result(self) -> dict[str, float]:
        end = resource.getrusage(resource.RUSAGE_SELF)
        assert self.start is not None, "run too short for the warm-up"
        r0, e0, n0, t0 = self.start
        events = self.events - e0
        user, system = end.ru_utime - r0.ru_utime, end.ru_stime - r0.ru_stime
        out = {
            "events/s": events / (time.monotonic() - t0),
            "user": user / events * 1e6,
            "system": system / events * 1e6,
            "total": (user + system) / events * 1e6,
        }
        if self.reads > n0:
            out["events/read"] = events / (self.reads - n0)
        return out


class CountingProtocol(asyncio.Protocol):
    def __init__(self, meter: Meter, read_size: int | None) -> None:
        self.meter = meter
        self.read_size = read_size
        self.times: list[float] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if self.read_size is not None:
            transport.max_size = self.read_size  # type: ignore[attr-defined]
        self.next_request()

    def next_request(self) -> None:
        if self.meter.sent >= self.meter.total_requests:
            self.transport.close()
            return
        self.meter.sent += 1
        self.transport.write(REQUEST)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        events = data.count(b"data: {")
        self.times.extend([now] * events)
        self.meter.add(events, 1)
        if data.endswith(b"0\r\n\r\n"):  # the chunked body's end
            self.times = []
            self.meter.done += 1
            if self.meter.done == self.meter.total_requests:
                self.meter.finished.set_result(None)
            self.next_request()


async def trivial(url: str, requests: int, read_size: int | None) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    host, port = url.removeprefix("http://").split(":")
    meter = Meter(requests)
    for _ in range(CONCURRENCY):
        await loop.create_connection(lambda: CountingProtocol(meter, read_size), host, int(port))
    await meter.finished
    return meter.result()


async def streaming_client(url: str, requests: int, endpoint: str = "completions") -> dict[str, float]:
    from rampwatch.loadgen.transport.client import StreamingClient
    from rampwatch.loadgen.workload.requests import PreparedRequest

    text = "hello " * 32
    prompt = {"messages": [{"role": "user", "content": text}]} if endpoint == "chat" else {"prompt": text}
    req = PreparedRequest(
        endpoint,  # type: ignore[arg-type]
        {**prompt, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True},
        32,
        OUTPUT_TOKENS,
    )
    t0 = time.monotonic()
    meter = Meter(requests)
    async with StreamingClient(
        url, "tiny", connection_limit=CONCURRENCY, clock=lambda: time.monotonic() - t0
    ) as client:

        async def worker() -> None:
            while meter.sent < requests:
                meter.sent += 1
                rec = await client.send(req, meter.sent, 0.0)
                if not rec.ok:
                    raise SystemExit(f"request failed: {rec.error_class}: {rec.error}")
                meter.add(rec.completion_tokens, 0)

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return meter.result()


def run_on(loop_kind: str, coro) -> dict[str, float]:
    if loop_kind == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per measurement")
    parser.add_argument("--sim-hardware", default="instant")
    parser.add_argument("--sim-model", default="tiny")
    parser.add_argument("--sim-speed", type=float, default=1.0)
    parser.add_argument("--target", default=None, help="a running server's URL instead of the simulator")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    parser.add_argument("--client-only", action="store_true", help="only the StreamingClient rows")
    args = parser.parse_args()

    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    cases = [
        (
            "trivial protocol, asyncio, 256 KiB reads (asyncio's default)",
            "asyncio",
            lambda url: trivial(url, args.requests, None),
        ),
        ("trivial protocol, asyncio, 64 KiB reads", "asyncio", lambda url: trivial(url, args.requests, 64 * 1024)),
        ("trivial protocol, uvloop", "uvloop", lambda url: trivial(url, args.requests, None)),
        (
            f"StreamingClient {args.endpoint}, asyncio",
            "asyncio",
            lambda url: streaming_client(url, args.requests, args.endpoint),
        ),
        (
            f"StreamingClient {args.endpoint}, uvloop",
            "uvloop",
            lambda url: streaming_client(url, args.requests, args.endpoint),
        ),
    ]
    if args.client_only:
        cases = cases[3:]
    config = SimConfig(hardware=args.sim_hardware, model=args.sim_model, speed=args.sim_speed, served_model_name="tiny")
    server = args.target or f"simulator {args.sim_hardware}/{args.sim_model} speed {args.sim_speed:g}"
    print(
        f"{server}; {CONCURRENCY} streams of {OUTPUT_TOKENS} tokens, {args.requests} requests per row; "
        "CPU-s per 1M streamed events"
    )
    print()
    print("| reader | events/s | events per read | user | system | total |")
    print("|---|---|---|---|---|---|")
    with contextlib.ExitStack() as stack:
        url = args.target or stack.enter_context(serving_sim(config)).url
        for name, loop_kind, make in cases:
            r = run_on(loop_kind, make(url))
            per_read = f"{r['events/read']:.2f}" if "events/read" in r else "-"
            print(
                f"| {name} | {r['events/s']:,.0f} | {per_read} | {r['user']:.2f} | {r['system']:.2f} | "
                f"{r['total']:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
