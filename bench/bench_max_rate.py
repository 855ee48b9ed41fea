"""How fast the load can be sent: the maximum sustained request rate of `vllm bench serve`
and of `rampwatch run` with ``--workers 1`` and ``--workers N``, and the send lateness
at a high rate with many long streams in flight.

    .venv/bin/python bench/bench_max_rate.py                 # both parts
    .venv/bin/python bench/bench_max_rate.py --skip-vllm     # without the vLLM venv
    .venv/bin/python bench/bench_max_rate.py --part lateness --lateness-rate 500 --workers 2
    .venv/bin/python bench/bench_max_rate.py --part lateness --lateness-rate 200 --workers 1 --gc load,python

(a) Max rate: against the instant simulator (in its own process), each client runs a
constant-rate window of ``--window`` seconds at stepped rates (open loop, short answers);
a rate is *sustained* when the client completes at least 95 % of it (the result JSON's
``request_throughput`` ≥ 0.95 × offered, every request answered). The figure is the
highest sustained step before the first one that is not.

(b) Lateness: `rampwatch run` at ``--lateness-rate`` req/s against a simulated H100
slowed to ``--sim-speed`` × real time, so that each ``--output-tokens``-token answer
stays open for seconds while the simulator runs only a few steps a second (its CPU is
not the bound); the peak in flight is read from the recording's ticks, the lateness of
each request (sent_at − scheduled_at) from its records: p50/p99/max, and the client's
own loop lag and collections from the result JSON; each with rampwatch's load-phase GC
policy and with Python's own (``--gc``, ``RAMPWATCH_LOAD_GC``), one after the other.

The load average is printed with each result: on a shared machine it bounds everything.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_client import TINY_MODEL, VLLM_PYTHON, vllm_cmd  # noqa: E402

SUSTAINED = 0.95
INPUT_TOKENS = 32
OUTPUT_TOKENS = 8


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def vllm_step(url: str, rate: float, n: int, tmp: Path) -> dict:
    result = tmp / f"vllm-{rate:g}.json"
    cmd = vllm_cmd(
        url, n, result, concurrency=None, rate=f"{rate:g}", input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS
    )
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(result.read_text())


def rampwatch_cmd(url: str, rate: float, schedule: str, workers: int, out: Path, output_tokens: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rampwatch.app.cli",
        "run",
        "random",
        "--headless",
        "--target",
        url,
        "--model",
        "tiny",
        "--tokenizer",
        str(TINY_MODEL),
        "--workers",
        str(workers),
        "--progress-interval",
        "3600",
        "--result-json",
        str(out.with_suffix(".json")),
        "--record",
        str(out.with_suffix(".rwrec")),
        "--max-error-rate",
        "1",
        "--set",
        f"workload.input_tokens={INPUT_TOKENS}",
        "--set",
        f"workload.output_tokens={output_tokens}",
        "--set",
        f"schedule={schedule}",
    ]


def rampwatch_step(url: str, rate: float, n: int, workers: int, tmp: Path) -> dict:
    out = tmp / f"rw-{workers}-{rate:g}"
    cmd = rampwatch_cmd(
        url, rate, f"{{kind: constant, rate: {rate:g}, num_requests: {n}}}", workers, out, OUTPUT_TOKENS
    )
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"rampwatch run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.with_suffix(".json").read_text())


def max_rate(name: str, step, rates: list[float], window_s: float) -> float:
    best = 0.0
    for rate in rates:
        n = int(rate * window_s)
        result = step(rate, n)
        achieved = result["request_throughput"]
        ok = achieved >= SUSTAINED * rate and result["completed"] == n
        print(
            f"  {name:28s} offered {rate:7.0f}/s  achieved {achieved:7.1f}/s  completed {result['completed']}/{n}  "
            f"{'sustained' if ok else 'NOT sustained'}  (load {load_average()})",
            flush=True,
        )
        if not ok:
            break
        best = rate
    return best


def part_max_rate(args: argparse.Namespace, tmp: Path) -> None:
    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    rates = [float(r) for r in args.rates.split(",")]
    print(
        f"(a) maximum sustained rate: {args.window:g} s windows, {INPUT_TOKENS}→{OUTPUT_TOKENS} tokens, instant simulator"
    )
    results = {}
    with serving_sim(SimConfig(hardware="instant", model="tiny", max_num_seqs=4096)) as sim:
        if not args.skip_vllm:
            results["vllm bench serve"] = max_rate(
                "vllm bench serve", lambda r, n: vllm_step(sim.url, r, n, tmp), rates, args.window
            )
        for workers in sorted({1, args.workers}):
            name = f"rampwatch --workers {workers}"
            results[name] = max_rate(
                name, lambda r, n, w=workers: rampwatch_step(sim.url, r, n, w, tmp), rates, args.window
            )
    for name, best in results.items():
        print(f"  max sustained: {name:28s} {best:7.0f} req/s")


def quantile_ms(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def part_lateness(args: argparse.Namespace, tmp: Path) -> None:
    from rampwatch.app.session import serving_sim
    from rampwatch.record.reader import open_recording
    from rampwatch.sim.config import SimConfig

    rate, tokens = args.lateness_rate, args.output_tokens
    print(
        f"(b) lateness at {rate:g} req/s for {args.lateness_duration:g} s: {tokens}-token answers from a simulated "
        f"H100 slowed to {args.sim_speed:g}× real time"
    )
    # Slowed down (``speed``) real-hardware steps: each stream stays open for seconds while
    # the simulator runs only a few steps a second.
    config = SimConfig(hardware="h100", model="tiny", max_num_seqs=8192, speed=args.sim_speed)
    policies = args.gc.split(",")
    with serving_sim(config) as sim:
        for workers in sorted({1, args.workers}):
            for policy in policies:
                out = tmp / f"late-{workers}-{policy}"
                schedule = f"{{kind: constant, rate: {rate:g}, duration_s: {args.lateness_duration:g}}}"
                started = time.monotonic()
                # RAMPWATCH_LOAD_GC=python: Python's own GC policy during the load (before
                # the load-phase policy), in every process of the run
                env = dict(os.environ, RAMPWATCH_LOAD_GC=policy)
                proc = subprocess.run(
                    rampwatch_cmd(sim.url, rate, schedule, workers, out, tokens),
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    env=env,
                )
                if proc.returncode not in (0, 1):
                    raise SystemExit(f"rampwatch run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
                recording = open_recording(out.with_suffix(".rwrec"))
                records = recording.requests
                peak = max((t.in_flight for t in recording.ticks), default=0)
                recording.close()
                client = json.loads(out.with_suffix(".json").read_text()).get("rampwatch_client") or {}
                late = sorted(r.sent_at - r.scheduled_at for r in records)
                ok = sum(1 for r in records if r.ok)
                print(
                    f"  rampwatch --workers {workers}, GC {policy:6s}: {len(records)} requests ({ok} ok), "
                    f"peak in flight {peak}, lateness p50 {quantile_ms(late, 0.5):.2f} ms  "
                    f"p99 {quantile_ms(late, 0.99):.2f} ms  max {late[-1] * 1000:.2f} ms; "
                    f"loop lag p99 {client.get('loop_lag_p99_ms') or 0:.2f} ms  max {client.get('loop_lag_max_ms') or 0:.1f} ms, "
                    f"GC passes {'/'.join(map(str, client.get('gc_collections') or []))} "
                    f"(longest {client.get('gc_max_pause_ms') or 0:.0f} ms)  "
                    f"(wall {time.monotonic() - started:.0f} s, load {load_average()})",
                    flush=True,
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["all", "max-rate", "lateness"], default="all")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="N of --workers N (default: nproc)")
    parser.add_argument("--rates", default="100,200,300,400,600,800,1000,1200,1600,2000,2400,3200")
    parser.add_argument("--window", type=float, default=5.0, help="seconds per rate step")
    parser.add_argument("--lateness-rate", type=float, default=500.0)
    parser.add_argument("--lateness-duration", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--sim-speed", type=float, default=0.1, help="simulated seconds per wall second (lateness)")
    parser.add_argument(
        "--gc",
        default="load,python",
        help="GC policies of the lateness runs, comma-separated: load (rampwatch's, the default), python "
        "(Python's own, as before the load-phase policy)",
    )
    args = parser.parse_args()
    if not args.skip_vllm and not (VLLM_PYTHON.exists() and TINY_MODEL.exists()):
        raise SystemExit(f"missing {VLLM_PYTHON} or {TINY_MODEL}: run `bash scripts/setup_vllm.sh` or --skip-vllm")
    print(f"{os.cpu_count()} CPUs, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="rw-max-rate-") as tmp:
        if args.part in ("all", "max-rate"):
            part_max_rate(args, Path(tmp))
        if args.part in ("all", "lateness"):
            part_lateness(args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
