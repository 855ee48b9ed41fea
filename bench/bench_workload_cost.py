"""Production-like workload cost: client CPU per request of sessions, trace replay and a
mixture against the single-turn ``chat`` scenario at the same request rate.

The simulator runs in its own process on the ``instant`` preset (no simulated GPU time).
Each client is ``rampwatch run --headless --no-record`` as a child process; its CPU (user
+ sys) is the ``getrusage(RUSAGE_CHILDREN)`` delta around it. Every workload runs for a
short and a long duration and the per-request figure is the difference (start-up cancels
out).

Every workload sends the same requests in size: a 60-token shared prefix, 64 new input
tokens and 64 output tokens, on the chat endpoint (the trace on completions, its only
layout for token lengths), at ``--rate`` requests/s:

- ``chat``: the ``chat`` scenario, constant gaps;
- ``sessions``: ``--rate / --turns`` sessions/s of ``--turns`` turns each with no think
  time, every turn carrying the whole history with the streamed answers (so its prompts
  grow: that is the workload);
- ``trace``: a generated Mooncake trace with one row every ``1 / --rate`` s, each row's
  first block (``block_tokens: 60``) shared;
- ``mix``: the chat workload split into three classes of equal weight (three class
  series builders beside the run's).

    .venv/bin/python bench/bench_workload_cost.py [--rate 40] [--turns 4] [--short 8] [--long 24] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIX, NEW, OUT = 60, 64, 64


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(url: str, scenario: str, sets: list[str], result: Path, timeout_s: float) -> tuple[float, int]:
    """(CPU seconds, completed requests) of one headless run."""
    cmd = [sys.executable, "-m", "rampwatch.app.cli", "run", scenario, "--headless", "--no-record"]
    cmd += ["--target", url, "--result-json", str(result), "--progress-interval", "60"]
    for item in sets:
        cmd += ["--set", item]
    before = child_cpu()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    cpu = child_cpu() - before
    if proc.returncode != 0:
        raise SystemExit(f"{scenario}: run failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    return cpu, int(json.loads(result.read_text())["completed"])


def trace_scenario(folder: Path, rate: float, seconds: float) -> Path:
    """A Mooncake trace of ``rate`` rows a second for ``seconds``, and its scenario."""
    rows = int(rate * seconds)
    trace = folder / f"trace-{seconds:g}.jsonl"
    with trace.open("w") as fh:
        for i in range(rows):
            row = {"timestamp": round(i * 1000 / rate, 3), "input_length": PREFIX + NEW, "output_length": OUT}
            fh.write(json.dumps({**row, "hash_ids": [0]}) + "\n")
    scenario = folder / f"trace-{seconds:g}.yaml"
    scenario.write_text(
        f"name: trace-cost\nschedule: {{kind: trace, path: {trace.name}, format: mooncake, block_tokens: {PREFIX}}}\n"
        "workload: {}\n"
    )
    return scenario


def workloads(args: argparse.Namespace, folder: Path, seconds: float) -> dict[str, tuple[str, list[str]]]:
    chat = [f"workload.system_prompt={{tokens: {PREFIX}}}", f"workload.input_tokens={NEW}"]
    chat += [f"workload.output_tokens={OUT}"]
    constant = f"schedule={{kind: constant, rate: {args.rate}, duration_s: {seconds}}}"
    one_class = f"{{system_prompt: {{tokens: {PREFIX}}}, input_tokens: {NEW}, output_tokens: {OUT}"
    mix = "workload={mix: [" + ", ".join(f"{one_class}, name: c{i}, weight: 1}}" for i in range(3)) + "]}"
    return {
        "chat": ("chat", [*chat, constant]),
        "sessions": (
            "chat",
            [
                *chat,
                f"schedule={{kind: constant, rate: {args.rate / args.turns}, duration_s: {seconds}}}",
                f"workload.sessions={{turns: {args.turns}, think_time_s: 0}}",
            ],
        ),
        "trace": (str(trace_scenario(folder, args.rate, seconds)), []),
        "mix": ("chat", [constant, mix]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=40.0, help="requests per second (default 40)")
    parser.add_argument("--turns", type=int, default=4, help="turns per session (default 4)")
    parser.add_argument("--short", type=float, default=8.0, help="short run, seconds (default 8)")
    parser.add_argument("--long", type=float, default=24.0, help="long run, seconds (default 24)")
    parser.add_argument("--only", action="append", default=[], help="run only these workloads (and chat)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds, the workloads' order rotated each round (medians are printed)"
    )
    args = parser.parse_args()

    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    with tempfile.TemporaryDirectory() as tmpdir, serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        tmp = Path(tmpdir)
        short, long = workloads(args, tmp, args.short), workloads(args, tmp, args.long)
        names = [name for name in short if name == "chat" or not args.only or name in args.only]
        costs: dict[str, list[float]] = {name: [] for name in names}
        ratios: dict[str, list[float]] = {name: [] for name in names if name != "chat"}
        for round_index in range(args.repeat):
            shift = round_index % len(names)
            figures = {}
            for name in names[shift:] + names[:shift]:
                short_cpu, short_n = run(sim.url, *short[name], tmp / f"{name}-short.json", args.short * 4 + 60)
                long_cpu, long_n = run(sim.url, *long[name], tmp / f"{name}-long.json", args.long * 4 + 60)
                figures[name] = (long_cpu - short_cpu) / max(1, long_n - short_n)
                costs[name].append(figures[name])
                print(
                    f"round {round_index + 1}: {name:9s} {long_n:6d} requests in {args.long:g} s "
                    f"({short_n} in {args.short:g} s): {figures[name] * 1e3:.3f} CPU-ms per request (steady state)",
                    flush=True,
                )
            for name in ratios:
                ratios[name].append(figures[name] / figures["chat"])
        print()
        print("| workload | CPU-ms per request (median) | vs chat, within each round (median, range) |")
        print("|---|---|---|")
        for name in names:
            vs = ratios.get(name)
            spread = f"{statistics.median(vs):.2f}× ({min(vs):.2f}–{max(vs):.2f})" if vs else "1"
            print(f"| {name} | {statistics.median(costs[name]) * 1e3:.2f} | {spread} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
