"""Send lateness while the server's /metrics is huge or slow.

The load runs open loop (`rampwatch run random --headless`, no concurrency cap) against the
`instant` simulator, while rampwatch scrapes a second, local server whose `/metrics` is:

- `small`: a real vLLM 0.32 page (~10 KB, the control),
- `6MB`: a vLLM-like page of 6 MB (under the default 8 MiB cap: read, then parsed on a
  worker thread),
- `6MB-slow`: the same page trickled out over ~1.5 s,
- `200MB`: a 200 MB page (over the cap: the scrape fails after reading 8 MiB).

For each it prints the send lateness (`sent_at - scheduled_at`, from the result JSON's
`queue_times`, which are exactly that without a concurrency cap) and the run's peak RSS
(`wait4` of that process).
No peer scrapes /metrics while it loads, so the control row is the comparison.

    .venv/bin/python bench/bench_metrics_lateness.py [--rps 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from aiohttp import web

from rampwatch.app.session import serving_sim
from rampwatch.sim.config import SimConfig

ROOT = Path(__file__).resolve().parent.parent
SMALL_PAGE = (ROOT / "tests" / "data" / "vllm-0.32.0-cpu" / "metrics-under-load.txt").read_bytes()


def big_page(size: int) -> bytes:
    """A vLLM-like page of about ``size`` bytes: many series of families rampwatch keeps."""
    line = 'vllm:num_requests_running{{engine="0",model_name="lora-{i}"}} 1.0\n'
    one = len(line.format(i=0)) + 4
    return SMALL_PAGE + "".join(line.format(i=i) for i in range(size // one)).encode()


class MetricsServer:
    """Serves one page at /metrics on a loopback port, in a process of its own (so that this
    process, whose children inherit its peak RSS figure, stays small)."""

    def __init__(self, size: int, trickle_s: float = 0.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve-metrics", str(size), "--trickle", str(trickle_s)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.process.stdout.readline().strip()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def serve_metrics(size: int, trickle_s: float) -> None:
    page = SMALL_PAGE if size == 0 else big_page(size)

    async def metrics(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        pieces = 50 if trickle_s else 1
        step = -(-len(page) // pieces)
        try:
            for i in range(0, len(page), step):
                await resp.write(page[i : i + step])
                if trickle_s:
                    await asyncio.sleep(trickle_s / pieces)
            await resp.write_eof()
        except ConnectionError:  # the scraper stopped reading (over its cap)
            pass
        return resp

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/metrics", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def lateness_run(target: str, metrics_url: str, rps: float, seconds: float, tmp: Path) -> tuple[list[float], float]:
    result = tmp / "result.json"
    result.unlink(missing_ok=True)
    n = int(rps * seconds)
    cmd = [
        sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", "--target", target,
        "--model", "tiny", "--no-record", "--result-json", str(result), "--metrics-url", metrics_url,
        "--set", f"schedule={{kind: constant, rate: {rps}, num_requests: {n}}}",
        "--set", "workload.input_tokens=32", "--set", "workload.output_tokens=16", "--progress-interval", "60",
    ]  # fmt: skip
    with open(tmp / "err.txt", "w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        _pid, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    peak_mb = usage.ru_maxrss / 1024
    if proc.returncode != 0:
        raise SystemExit(f"rampwatch run failed ({proc.returncode}):\n{stderr[-2000:]}")
    late_ms = [1000 * q for q in json.loads(result.read_text())["queue_times"]]
    return late_ms, peak_mb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rps", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--serve-metrics", type=int, help=argparse.SUPPRESS)  # the page server's own process
    parser.add_argument("--trickle", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_metrics is not None:
        serve_metrics(args.serve_metrics, args.trickle)
        return 0
    cases = [
        ("small", MetricsServer(0)),
        ("6MB", MetricsServer(6 * 1024 * 1024)),
        ("6MB-slow", MetricsServer(6 * 1024 * 1024, trickle_s=1.5)),
        ("200MB", MetricsServer(200 * 1024 * 1024)),
    ]
    print(
        f"open loop at {args.rps:g} req/s for {args.seconds:g} s against the instant simulator; "
        f"/metrics scraped every second from a second local server",
        flush=True,
    )
    print("| /metrics page | send lateness p50 (ms) | p99 (ms) | max (ms) | peak RSS of the run (MB) |")
    print("|---|---|---|---|---|")
    try:
        with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim, tempfile.TemporaryDirectory() as d:
            for name, server in cases:
                late, peak_mb = lateness_run(sim.url, server.url, args.rps, args.seconds, Path(d))
                print(
                    f"| {name} | {percentile(late, 50):.2f} | {percentile(late, 99):.2f} | {max(late):.2f} | "
                    f"{peak_mb:.0f} |",
                    flush=True,
                )
    finally:
        for _name, server in cases:
            server.stop()
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
