"""The run's loop with image requests: what each one costs the loop, and the lag a run
with images sees.

    .venv/bin/python bench/bench_image_requests.py                   # every part
    .venv/bin/python bench/bench_image_requests.py --part costs --requests 40
    .venv/bin/python bench/bench_image_requests.py --part splice
    .venv/bin/python bench/bench_image_requests.py --part run --rate 8 --duration 30 --images 4x512x512

``costs``: per workload (text only; 1 and 4 images of 512 × 512 and of 1280 × 720), a
real ``RequestsAhead`` (its builder process) feeding a real ``StreamingClient`` that sends
one request at a time to the simulator (``instant`` hardware, ``qwen2-vl-7b``: it reads
the images' headers and answers at once), on asyncio's own loop in this process. Every
callback the loop runs is timed in CPU time (``asyncio.events.Handle._run`` wrapped,
``time.thread_time``: a busy machine's preemptions left out). Per request: the loop's
busy time (all its callbacks, plus its share of the builder socket's reads), of it those
reads (``receive``: they come in bursts, so their total over the requests read), the
longest single callback (the stall a stream open at that moment would see), and, timed
apart on the same requests, ``take`` (the request out of the builder's frame) and
``body`` (the HTTP body's bytes: what ``_send_stream`` writes after the head). Medians.

``splice``: a chat payload of text of each size (2 KB to 1 MB), unpickled and turned into
its body in this process on both paths: a dict payload (as every request was before, and
still is below ``requests_ahead.ENCODE_FROM_BYTES``) and an encoded one, spliced.

``run``: `rampwatch run --headless` (a child process, its default loop) against the
simulator (``h100``, ``qwen2-vl-7b``, slowed to ``--sim-speed`` × real time so each
answer stays open for seconds and many streams are in flight), a constant rate of chat
requests carrying ``--images`` (COUNTxWIDTHxHEIGHT, or ``none``). It prints the run's own
loop lag and CPU wait (the result JSON's ``rampwatch_client``), the run's CPU and peak
RSS, the send lateness, TTFT p50/p99 and the peak in flight.

With ``--baseline DIR`` (another checkout with its own ``DIR/.venv``) every part runs on
both (the baseline first), so the two are compared on about the same machine load: on a
shared machine, run rounds in both orders and read the CPU wait beside each. Figures
only: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = ("none", "1x512x512", "4x512x512", "1x1280x720", "4x1280x720")


def images_spec(text: str) -> dict[str, int] | None:
    if text == "none":
        return None
    count, width, height = (int(x) for x in text.split("x"))
    return {"count": count, "width": width, "height": height}


def scenario(images: str, schedule: dict[str, Any]) -> Any:
    from rampwatch.loadgen.workload.scenario import validate_scenario

    workload: dict[str, Any] = {"system_prompt": {"tokens": 60}, "input_tokens": 256, "output_tokens": 16}
    spec = images_spec(images)
    if spec is not None:
        workload["images"] = spec
    return validate_scenario({"endpoint": "chat", "seed": 1, "schedule": schedule, "workload": workload}, "bench")


class CallbackTimes:
    """Every loop callback's CPU time; the builder socket's reads apart, and the frames
    (requests) they completed."""

    def __init__(self) -> None:
        self.busy = 0.0
        self.receive = 0.0
        self.longest = 0.0
        self.frames = 0

    def install(self) -> None:
        from rampwatch.loadgen.workload import requests_ahead

        builder_protocol = requests_ahead._BuiltRequests
        original = asyncio.events.Handle._run
        clock = time.thread_time  # the loop's own work: a busy machine's preemptions left out

        def timed_run(handle: asyncio.events.Handle) -> None:
            start = clock()
            try:
                original(handle)
            finally:
                took = clock() - start
                owner = getattr(handle._callback, "__self__", None)  # type: ignore[attr-defined]
                if isinstance(getattr(owner, "_protocol", None), builder_protocol):
                    self.receive += took  # counted apart, per frame: they come in bursts
                else:
                    self.busy += took
                self.longest = max(self.longest, took)

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]

    def reset(self) -> None:
        self.busy = self.longest = 0.0


def body_bytes(client: Any, request: Any) -> bytes:
    """The HTTP body ``_send_stream`` writes, whichever version of the client this is."""
    from rampwatch.loadgen.transport import client as client_module

    own = getattr(client, "body_bytes", None)
    return own(request) if own is not None else client_module._body_bytes(client.build_body(request))


async def costs_of(url: str, images: str, n: int) -> dict[str, float]:
    import copy
    import pickle

    from rampwatch.loadgen.transport.client import StreamingClient
    from rampwatch.loadgen.workload.request_factory import RequestFactory
    from rampwatch.loadgen.workload.requests_ahead import RequestsAhead

    factory = RequestFactory(scenario(images, {"kind": "constant", "rate": 1, "num_requests": n + 10}))
    ahead = RequestsAhead(factory, ahead_above_s=0.0)  # text too: as a 256-token prompt does
    await ahead.start()
    received = ahead._received

    def counted(tag: bytes, body: bytes) -> None:
        CALLBACKS.frames += 1
        received(tag, body)

    ahead._received = counted  # type: ignore[method-assign]
    CALLBACKS.frames, CALLBACKS.receive = 0, 0.0
    client = StreamingClient(url, "qwen2-vl-7b", connection_limit=1)
    await client.start()
    times = CALLBACKS
    rows: dict[str, list[float]] = {k: [] for k in ("busy", "longest", "take", "body", "bytes")}
    try:
        for i in range(n + 6):  # the probe's (built here) first, not counted
            await ahead.wait_ready()
            times.reset()
            await asyncio.sleep(0.05)  # the builder's next frames arrive (its reads come in bursts)
            started = time.thread_time()
            request = ahead.take()
            took = time.thread_time() - started
            record = await client.send(request, i, 0.0)
            if not record.ok:
                raise SystemExit(f"{images}: request {i} failed: {record.error_class} {record.error}")
            if i < 6:
                continue
            rows["busy"].append(times.busy)
            rows["longest"].append(times.longest)
            rows["take"].append(took)
            # The body again, timed apart (a copy of the request: as it was taken).
            again = pickle.loads(pickle.dumps(copy.copy(request)))
            started = time.thread_time()
            body = body_bytes(client, again)
            rows["body"].append(time.thread_time() - started)
            rows["bytes"].append(len(body))
    finally:
        await client.close()
        await ahead.close()
    per_frame = CALLBACKS.receive / max(1, CALLBACKS.frames)  # the builder's reads, per request read
    got = {k: statistics.median(v) for k, v in rows.items() if v}
    return got | {"receive": per_frame, "busy": got["busy"] + per_frame, "longest_max": max(rows["longest"])}


CALLBACKS = CallbackTimes()


def part_costs(args: argparse.Namespace) -> None:
    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    CALLBACKS.install()
    print(f"\n== loop CPU per request ({args.requests} requests each, medians; receive: per frame received; ms)")
    print(
        f"{'workload':12s} {'body MB':>8s} {'busy':>7s} {'receive':>8s} {'take':>7s} {'body':>7s} {'longest':>8s} {'max':>7s}"
    )
    config = SimConfig(hardware="instant", model="qwen2-vl-7b", max_num_seqs=1024)
    with serving_sim(config) as sim:
        for images in args.workloads:
            row = asyncio.run(costs_of(sim.url, images, args.requests))
            print(
                f"{images:12s} {row['bytes'] / 1e6:8.2f} {row['busy'] * 1e3:7.2f} {row['receive'] * 1e3:8.2f} "
                f"{row['take'] * 1e3:7.3f} {row['body'] * 1e3:7.3f} {row['longest'] * 1e3:8.2f} "
                f"{row['longest_max'] * 1e3:7.2f}",
                flush=True,
            )


def part_splice(args: argparse.Namespace) -> None:
    """A chat payload of each size, taken and turned into its body, on the two paths."""
    import pickle
    import random
    import string

    try:
        from rampwatch.loadgen.workload.encoded_payload import encode_payload
        from rampwatch.loadgen.workload.requests_ahead import _request_frame, _unframed
    except ImportError:
        print("\n== splice: no encoded payloads in this checkout")
        return
    from rampwatch.loadgen.transport.client import StreamingClient, _body_bytes
    from rampwatch.loadgen.workload.requests import PreparedRequest

    client = StreamingClient("http://127.0.0.1:9", "qwen2-vl-7b")
    rng = random.Random(1)
    print("\n== take + body per request, in µs (best of 20 rounds of 100): a dict payload vs an encoded one")
    for size in (2_000, 8_000, 16_000, 32_000, 64_000, 256_000, 1_000_000):
        words = " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(size // 5))
        messages = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": words[:size]}]
        request = PreparedRequest(
            "chat", {"messages": messages, "max_completion_tokens": 100, "ignore_eos": True}, 1, 1
        )
        plain = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        request.payload = encode_payload(request.payload)  # type: ignore[assignment]
        encoded = b"".join(_request_frame(request)[1])
        best = {"dict": float("inf"), "encoded": float("inf")}
        for _ in range(20):
            started = time.perf_counter()
            for _ in range(100):
                _body_bytes(client.build_body(pickle.loads(plain)))
            best["dict"] = min(best["dict"], (time.perf_counter() - started) / 100)
            started = time.perf_counter()
            for _ in range(100):
                client.body_bytes(_unframed(encoded))
            best["encoded"] = min(best["encoded"], (time.perf_counter() - started) / 100)
        print(
            f"{size:>9,} bytes of text: dict {best['dict'] * 1e6:7.1f}, encoded {best['encoded'] * 1e6:7.1f}",
            flush=True,
        )


def part_run(args: argparse.Namespace) -> None:
    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    print(
        f"\n== run: {args.rate:g} req/s for {args.duration:g} s, images {args.images}, 256-token prompts, "
        f"{args.output_tokens} output tokens, simulated H100 qwen2-vl-7b at {args.sim_speed:g}x real time"
    )
    config = SimConfig(hardware="h100", model="qwen2-vl-7b", max_num_seqs=1024, speed=args.sim_speed)
    with serving_sim(config) as sim, tempfile.TemporaryDirectory(prefix="rw-image-run-") as tmp:
        out = Path(tmp)
        sets = [
            "workload.input_tokens=256",
            f"workload.output_tokens={args.output_tokens}",
            "workload.system_prompt={tokens: 60}",
            f"schedule={{kind: constant, rate: {args.rate:g}, duration_s: {args.duration:g}}}",
            "drain=wait",
        ]
        spec = images_spec(args.images)
        if spec is not None:
            sets.append("workload.images={" + ", ".join(f"{k}: {v}" for k, v in spec.items()) + "}")
        cmd = [sys.executable, "-m", "rampwatch.app.cli", "run", "chat", "--headless", "--target", sim.url]
        cmd += ["--model", "qwen2-vl-7b", "--record", str(out / "run.rwrec"), "--result-json", str(out / "run.json")]
        cmd += ["--progress-interval", "60", "--max-error-rate", "1"]
        for item in sets:
            cmd += ["--set", item]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration * 4 + 120)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the run and its builder (the simulator is reaped later)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        if proc.returncode != 0:
            raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
        result = json.loads((out / "run.json").read_text())
        lag = result.get("rampwatch_client") or {}
        figures = [lag.get(k) for k in ("loop_lag_p50_ms", "loop_lag_p99_ms", "loop_lag_max_ms", "cpu_wait_pct")]
        p50, p99, peak, cpu_wait = (float("nan") if x is None else float(x) for x in figures)
        print(
            f"the run's loop lag p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {peak:.1f} ms "
            f"({lag.get('loop_lag_samples')} samples); CPU wait {cpu_wait:.1f} %; "
            f"the run's CPU (its builder's with it) {cpu:.1f} s, peak RSS {after.ru_maxrss / 1024:.0f} MB"
        )
        print(recording_line(out / "run.rwrec"), flush=True)


def recording_line(path: Path) -> str:
    from rampwatch.record.reader import open_recording

    with open_recording(path) as recording:
        records = list(recording.requests)
        peak = max((t.in_flight for t in recording.ticks), default=0)
    ok = [r for r in records if r.ok]
    late = sorted(r.sent_at - r.scheduled_at for r in records)
    ttft = sorted(r.ttft for r in ok if r.ttft is not None)

    def q(values: list[float], x: float) -> float:
        return values[min(len(values) - 1, int(x * len(values)))] * 1000 if values else float("nan")

    return (
        f"{len(records)} requests ({len(ok)} ok), peak in flight {peak}; send lateness p50 {q(late, 0.5):.2f} ms, "
        f"p99 {q(late, 0.99):.2f} ms; TTFT p50 {q(ttft, 0.5):.1f} ms, p99 {q(ttft, 0.99):.1f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["all", "costs", "splice", "run"], default="all")
    parser.add_argument("--requests", type=int, default=30, help="requests per workload (costs)")
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), help="COUNTxWIDTHxHEIGHT or none")
    parser.add_argument("--rate", type=float, default=8.0, help="requests per second (run)")
    parser.add_argument("--duration", type=float, default=30.0, help="the schedule's seconds (run)")
    parser.add_argument("--images", default="4x512x512", help="COUNTxWIDTHxHEIGHT or none (run)")
    parser.add_argument("--output-tokens", type=int, default=128, help="(run)")
    parser.add_argument("--sim-speed", type=float, default=0.1, help="simulated seconds per wall second (run)")
    parser.add_argument("--baseline", type=Path, help="another checkout with its own .venv: every part on both")
    args = parser.parse_args()
    if args.baseline is not None and not os.environ.get("_RW_BENCH_CHILD"):
        return compare(args)
    print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {sys.prefix}")
    if args.part in ("all", "costs"):
        part_costs(args)
    if args.part in ("all", "splice"):
        part_splice(args)
    if args.part in ("all", "run"):
        part_run(args)
    return 0


def compare(args: argparse.Namespace) -> int:
    """This script under each checkout's interpreter in turn: the baseline first."""
    argv = [a for a in sys.argv[1:]]
    env = {**os.environ, "_RW_BENCH_CHILD": "1"}
    for python, label in (
        (args.baseline / ".venv/bin/python", f"baseline {args.baseline}"),
        (Path(sys.executable), "this checkout"),
    ):
        print(f"\n######## {label}", flush=True)
        subprocess.run([str(python), str(Path(__file__).resolve()), *argv], env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
