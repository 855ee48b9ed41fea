"""Session workload cost: client CPU per request of ``multi-turn-chat``-style sessions
against the single-turn ``chat`` scenario at the same request rate.

The simulator runs in its own process on the ``instant`` preset (no simulated GPU time).
Each client is ``rampwatch run --headless --no-record`` as a child process; its CPU (user
+ sys) is the ``getrusage(RUSAGE_CHILDREN)`` delta around it. Every workload runs for a
short and a long duration and the per-request figure is the difference (start-up cancels
out).

Workloads, both on the chat endpoint with a 60-token system prompt, 64 new input tokens
and 64 output tokens per request: ``chat`` at ``--rate`` requests/s (constant gaps);
``sessions``: ``--rate / --turns`` sessions/s of ``--turns`` turns each with no think
time, every turn carrying the whole history with the streamed answers.

    .venv/bin/python bench/bench_sessions.py [--rate 40] [--turns 4] [--short 8] [--long 24]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(url: str, sets: list[str], duration: float, result: Path) -> tuple[float, int]:
    """(CPU seconds, completed requests) of one headless run."""
    cmd = [sys.executable, "-m", "rampwatch.app.cli", "run", "chat", "--headless", "--no-record"]
    cmd += ["--target", url, "--result-json", str(result), "--progress-interval", "60"]
    for item in [*sets, f"schedule.duration_s={duration}"]:
        cmd += ["--set", item]
    before = child_cpu()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=duration * 4 + 60)
    cpu = child_cpu() - before
    if proc.returncode != 0:
        raise SystemExit(f"run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return cpu, int(json.loads(result.read_text())["completed"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=40.0, help="requests per second (default 40)")
    parser.add_argument("--turns", type=int, default=4, help="turns per session (default 4)")
    parser.add_argument("--short", type=float, default=8.0, help="short run, seconds (default 8)")
    parser.add_argument("--long", type=float, default=24.0, help="long run, seconds (default 24)")
    args = parser.parse_args()

    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    common = [
        "workload.system_prompt={tokens: 60}",
        "workload.input_tokens=64",
        "workload.output_tokens=64",
    ]
    workloads = {
        "chat": common + [f"schedule={{kind: constant, rate: {args.rate}}}"],
        "sessions": common
        + [
            f"schedule={{kind: constant, rate: {args.rate / args.turns}}}",
            f"workload.sessions={{turns: {args.turns}, think_time_s: 0}}",
        ],
    }
    with tempfile.TemporaryDirectory() as tmp, serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        figures = {}
        for name, sets in workloads.items():
            short_cpu, short_n = run(sim.url, sets, args.short, Path(tmp) / f"{name}-short.json")
            long_cpu, long_n = run(sim.url, sets, args.long, Path(tmp) / f"{name}-long.json")
            per_request = (long_cpu - short_cpu) / max(1, long_n - short_n)
            figures[name] = per_request
            print(
                f"{name:9s} {long_n:6d} requests in {args.long:g} s ({short_n} in {args.short:g} s): "
                f"{per_request * 1e3:.3f} CPU-ms per request (steady state)"
            )
        print(f"sessions / chat: {figures['sessions'] / figures['chat']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
