"""How fast the load can be sent: the maximum sustained request rate of `vllm bench serve`
and of `rampwatch run` with ``--workers 1`` and ``--workers N``, and the send lateness
at a high rate with many long streams in flight.

    .venv/bin/python bench/bench_max_rate.py                 # both parts
    .venv/bin/python bench/bench_max_rate.py --skip-vllm     # without the vLLM venv
    .venv/bin/python bench/bench_max_rate.py --part lateness --lateness-rate 500 --workers 2
    .venv/bin/python bench/bench_max_rate.py --part lateness --lateness-rate 200 --workers 1 --gc load,python
    .venv/bin/python bench/bench_max_rate.py --part max-rate --skip-vllm --sim-api-server-count 2

(a) Max rate: against the instant simulator (in its own process), each client runs a
constant-rate window of ``--window`` seconds at stepped rates (open loop, short answers);
a rate is *sustained* when the client completes at least 95 % of it (the result JSON's
``request_throughput`` ≥ 0.95 × offered, every request answered). The figure is the
highest sustained step before the first one that is not. ``--sim-api-server-count N``
serves the simulator from N processes (``--data-parallel-size N --api-server-count N``;
the instant engines take no time, so N engines change nothing but where requests wait).
For each rampwatch step the CPU of every simulator and client process is sampled from
/proc: each one's median share of a core over the seconds the load ran (those in which
the simulator was busy), and which side saturated — a process at ≥ 90 % of a core, or
both sides together at ≥ 90 % of the machine's cores.

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
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_client import TINY_MODEL, VLLM_PYTHON, vllm_cmd  # noqa: E402

SUSTAINED = 0.95
INPUT_TOKENS = 32
OUTPUT_TOKENS = 8
# A process using this share of one core or more is saturated; both sides together at
# this share of every core: the machine is.
SATURATED = 0.90
CPU_SAMPLE_S = 0.25
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


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


def process_table() -> dict[int, tuple[int, int]]:
    """Every process: pid → (parent pid, user + system CPU in clock ticks)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited between the listing and the read
            table[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return table


def tree(table: dict[int, tuple[int, int]], root: int) -> list[int]:
    """``root`` and its descendants."""
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, (parent, _) in table.items() if parent in frontier]
        found += frontier
    return [pid for pid in found if pid in table]


class CpuSampler:
    """The CPU of each process of two trees (the simulator's, the client's), sampled
    from /proc while a step runs."""

    def __init__(self, roots: dict[str, int]) -> None:
        self.roots = roots
        self.samples: list[tuple[float, dict[tuple[str, int], int]]] = []

    def sample(self) -> None:
        table = process_table()
        ticks = {(side, pid): table[pid][1] for side, root in self.roots.items() for pid in tree(table, root)}
        self.samples.append((time.monotonic(), ticks))

    def loaded_shares(self) -> dict[tuple[str, int], float]:
        """Each process's median share of a core over the 1 s spans in which the simulator
        was busy (≥ 5 % of a core: the load was running; the client's start-up and its
        read-back at the end are left out)."""
        spans = []
        step = max(1, round(1.0 / CPU_SAMPLE_S))
        for (t0, a), (t1, b) in zip(self.samples[::step], self.samples[step::step]):
            shares = {key: (b[key] - a.get(key, b[key])) / CLOCK_TICKS / (t1 - t0) for key in b}
            if sum(v for (side, _), v in shares.items() if side == "sim") >= 0.05:
                spans.append(shares)
        keys = {key for shares in spans for key in shares}
        return {key: statistics.median(shares.get(key, 0.0) for shares in spans) for key in sorted(keys)}


def saturation(shares: dict[tuple[str, int], float]) -> str:
    """Each process's share of a core, and which side saturated."""
    if not shares:
        return "CPU: no span with the simulator busy"
    # Processes under 0.5 % of a core (the server's guard, the simulator's parent) are left out of the list.
    by_side = {side: [v for (s, _), v in shares.items() if s == side and v >= 0.005] for side in ("sim", "client")}
    text = "  ".join(f"{side} " + "+".join(f"{v:.0%}" for v in values) for side, values in by_side.items())
    full = [side for side, values in by_side.items() if any(v >= SATURATED for v in values)]
    if full:
        verdict = " and ".join(full)
    elif sum(shares.values()) >= SATURATED * (os.cpu_count() or 1):
        verdict = "the machine (every core busy, no process at a full core)"
    else:
        verdict = "neither"
    return f"CPU {text}: saturated: {verdict}"


def rampwatch_step(url: str, rate: float, n: int, workers: int, tmp: Path, sim_pid: int) -> dict:
    out = tmp / f"rw-{workers}-{rate:g}"
    cmd = rampwatch_cmd(
        url, rate, f"{{kind: constant, rate: {rate:g}, num_requests: {n}}}", workers, out, OUTPUT_TOKENS
    )
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        sampler = CpuSampler({"sim": sim_pid, "client": proc.pid})
        while proc.poll() is None:
            sampler.sample()
            time.sleep(CPU_SAMPLE_S)
        if proc.returncode not in (0, 1):
            stderr.seek(0)
            raise SystemExit(f"rampwatch run failed ({proc.returncode}):\n{stderr.read().decode()[-3000:]}")
    result = json.loads(out.with_suffix(".json").read_text())
    result["cpu"] = saturation(sampler.loaded_shares())
    return result


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
        if "cpu" in result:
            print(f"  {'':28s} {result['cpu']}", flush=True)
        if not ok:
            break
        best = rate
    return best


@contextmanager
def instant_sim(api_server_count: int):
    """The instant simulator, from ``api_server_count`` processes, as `rampwatch run`
    starts it (a managed server)."""
    from rampwatch.app.session import sim_serve_text
    from rampwatch.loadgen.server.managed import ManagedServer, ServeCommand
    from rampwatch.sim.config import SimConfig

    config = SimConfig(hardware="instant", model="tiny", max_num_seqs=4096, engines=api_server_count)
    text = sim_serve_text(config) + f" --api-server-count {api_server_count}"
    with ManagedServer(ServeCommand.parse(text)) as server:
        server.start(30.0)
        yield server


def part_max_rate(args: argparse.Namespace, tmp: Path) -> None:
    rates = [float(r) for r in args.rates.split(",")]
    n = args.sim_api_server_count
    print(
        f"(a) maximum sustained rate: {args.window:g} s windows, {INPUT_TOKENS}→{OUTPUT_TOKENS} tokens, instant "
        f"simulator, {n} process{'es' if n > 1 else ''}"
    )
    results = {}
    with instant_sim(n) as sim:
        sim_pid = sim.pid
        assert sim_pid is not None
        if not args.skip_vllm:
            results["vllm bench serve"] = max_rate(
                "vllm bench serve", lambda r, n: vllm_step(sim.url, r, n, tmp), rates, args.window
            )
        for workers in sorted({1, args.workers}):
            name = f"rampwatch --workers {workers}"
            results[name] = max_rate(
                name, lambda r, n, w=workers: rampwatch_step(sim.url, r, n, w, tmp, sim_pid), rates, args.window
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
    parser.add_argument(
        "--sim-api-server-count",
        type=int,
        default=1,
        metavar="N",
        help="serve the max-rate part's simulator from N processes (default 1)",
    )
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
    if args.sim_api_server_count < 1:
        parser.error(f"--sim-api-server-count {args.sim_api_server_count}: must be at least 1")
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
