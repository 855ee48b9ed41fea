"""How much the client's own timing moves the ITLs it reports: the inter-token gaps
`rampwatch run` observed against the gaps the simulator emitted (its ground truth), at
a light and a heavy load of long streams.

    .venv/bin/python bench/bench_itl_distortion.py                  # ~100 and ~5,000 streams in flight
    .venv/bin/python bench/bench_itl_distortion.py --quick          # 5 s windows (~100 and ~2,500)
    .venv/bin/python bench/bench_itl_distortion.py --points 35x64,500x16 --duration 10 --workers 1

For each load point RATExTOKENS, `rampwatch sim` starts in its own process with
``--chunk-gaps-out``: a simulated H100 (``tiny`` model) slowed to ``--sim-speed`` × real
time, so that answers stay open for seconds while the simulator runs few steps a second
and stays light (as bench_max_rate.py's lateness part). The light point (35 req/s of
64-token answers) holds ~100 streams with steps of ~40 ms; the heavy one (500 req/s of
16-token answers) is more than the slowed engine completes, so the streams in flight
grow through the window to ~5,000 at 10 s, each step ~1 s apart. `rampwatch run
--headless --save-detailed` sends the constant rate for ``--duration`` seconds; the
simulator is then stopped with SIGTERM and writes the gaps between the writes of each
completed stream's successive token chunks (``sim.server``: the client's ITL
definition, chunk for chunk). Printed side by side: the server-emitted gap p50/p99/max,
the client-observed ITL p50/p99/max (the result JSON's ``itls``, successful requests),
the distortion (client − server) at p50 and p99, the peak in flight (the recording's
ticks) and the load average. Percentiles are numpy's linear ones on both sides, as
`vllm bench serve` computes them. Comparing percentiles hides a client that moves gaps
both ways, so each request is also paired with the stream that served it (the run keeps
the answers' texts, ``--save-generated-texts``; the simulator keys each stream by its
text, ``sim.chunk_gaps``) and each of its ITLs with the gap the server emitted: the
second table gives that per-gap distortion, client − server, at p1/p50/p99 and its size
|client − server| at p99 and max. Target to report against: p99 distortion ≤ 1 ms, read
here as the per-gap |client − server| at p99.
Figures only: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rampwatch.sim.chunk_gaps import ChunkGaps, text_key

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_client import TINY_MODEL  # noqa: E402
from bench_max_rate import load_average, rampwatch_cmd  # noqa: E402

TARGET_P99_MS = 1.0
SIM_START_TIMEOUT_S = 60.0


def start_sim(speed: float, gaps_out: Path) -> tuple[subprocess.Popen, str]:
    """`rampwatch sim` with ``--chunk-gaps-out``; the process and its URL."""
    # max-num-seqs above the heavy point's streams in flight: none waits for a batch slot.
    cmd = [sys.executable, "-m", "rampwatch.app.cli", "sim", "--hardware", "h100", "--model", "tiny"]
    cmd += ["--max-num-seqs", "8192", "--speed", repr(speed), "--port", "0", "--chunk-gaps-out", str(gaps_out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("rampwatch sim: serving "):
        proc.kill()
        raise SystemExit(f"rampwatch sim did not start: {line}{proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split(" on ")[1].split(" ")[0]


def stop_sim(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"rampwatch sim exited with {proc.returncode}:\n{err[-3000:]}")


def percentiles_ms(values: np.ndarray) -> tuple[float, float, float]:
    """p50, p99 and max in ms (numpy's linear percentiles, as vllm bench's)."""
    if values.size == 0:
        return (float("nan"),) * 3
    p50, p99 = np.percentile(values, [50, 99])
    return p50 * 1e3, p99 * 1e3, float(values.max()) * 1e3


def peak_in_flight(recording_path: Path) -> int:
    from rampwatch.record.reader import open_recording

    recording = open_recording(recording_path)
    try:
        return max((t.in_flight for t in recording.ticks), default=0)
    finally:
        recording.close()


def load_point_spec(text: str) -> tuple[float, int]:
    """``RATExTOKENS`` (``500x16``): requests a second and output tokens per answer."""
    try:
        rate, tokens = text.split("x")
        point = float(rate), int(tokens)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected RATExTOKENS, e.g. 500x16") from None
    if point[0] <= 0 or point[1] < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: the rate must be > 0 and the answers ≥ 2 tokens")
    return point


def load_point(args: argparse.Namespace, rate: float, tokens: int, tmp: Path) -> dict:
    gaps_out = tmp / f"gaps-{rate:g}x{tokens}.npy"
    out = tmp / f"run-{rate:g}x{tokens}"
    sim, url = start_sim(args.sim_speed, gaps_out)
    try:
        schedule = f"{{kind: constant, rate: {rate:g}, duration_s: {args.duration:g}}}"
        cmd = rampwatch_cmd(url, rate, schedule, args.workers, out, tokens) + ["--save-generated-texts"]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - started
        load = load_average()  # read as the run ends: the load it ran under
        if proc.returncode not in (0, 1):
            raise SystemExit(f"rampwatch run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    finally:
        stop_sim(sim)
    result = json.loads(out.with_suffix(".json").read_text())
    client = np.fromiter((gap for itls in result["itls"] for gap in itls), dtype=np.float64)
    server = np.load(gaps_out)
    paired, per_gap = paired_distortion(result, ChunkGaps.read(gaps_out))
    return {
        "paired": paired,
        "per_gap": per_gap,
        "rate": rate,
        "tokens": tokens,
        "requests": len(result["itls"]),
        "ok": result["completed"],
        "peak": peak_in_flight(out.with_suffix(".rwrec")),
        "server": percentiles_ms(server),
        "client": percentiles_ms(client),
        "server_gaps": server.size,
        "client_gaps": client.size,
        "load": load,
        "wall": wall,
    }


def paired_distortion(result: dict, server: ChunkGaps) -> tuple[int, np.ndarray]:
    """Each successful request's ITLs minus the gaps of the stream that served it (the
    one whose answer had its text); the number of requests paired and the differences.
    A text two streams share, or gap counts that differ, leaves the request unpaired."""
    counts = np.frombuffer(server.counts, dtype=np.uint64).astype(np.int64)
    starts = np.cumsum(counts) - counts
    gaps = np.frombuffer(server.gaps, dtype=np.float64)
    stream_of: dict[int, int] = {}
    shared: set[int] = set()
    for index, key in enumerate(server.keys):
        if key in stream_of:
            shared.add(key)
        stream_of[key] = index
    differences = []
    for itls, text in zip(result["itls"], result["generated_texts"], strict=True):
        key = text_key(text)
        if not itls or key in shared or key not in stream_of:
            continue
        index = stream_of[key]
        if counts[index] != len(itls):
            continue
        differences.append(np.asarray(itls) - gaps[starts[index] : starts[index] + counts[index]])
    return len(differences), np.concatenate(differences) if differences else np.empty(0)


def print_table(rows: list[dict]) -> None:
    print()
    print(
        "| rate req/s × tokens | requests (ok) | peak in flight | server gap p50 / p99 / max (ms) | "
        "client ITL p50 / p99 / max (ms) | distortion p50 / p99 (ms) | gaps server / client | load avg |"
    )
    print("|---:|---:|---:|---|---|---|---|---|")
    for row in rows:
        s, c = row["server"], row["client"]
        print(
            f"| {row['rate']:g} × {row['tokens']} | {row['requests']:,} ({row['ok']:,}) | {row['peak']:,} | "
            f"{s[0]:.2f} / {s[1]:.2f} / {s[2]:.2f} | {c[0]:.2f} / {c[1]:.2f} / {c[2]:.2f} | "
            f"{c[0] - s[0]:+.2f} / {c[1] - s[1]:+.2f} | {row['server_gaps']:,} / {row['client_gaps']:,} | "
            f"{row['load']} |"
        )
    print()
    print(
        "| rate req/s × tokens | requests paired | per-gap client − server p1 / p50 / p99 (ms) | "
        "|client − server| p99 / max (ms) |"
    )
    print("|---:|---:|---|---|")
    for row in rows:
        d = row["per_gap"] * 1e3
        if d.size:
            p1, p50, p99 = np.percentile(d, [1, 50, 99])
            size_p99, size_max = np.percentile(np.abs(d), 99), np.abs(d).max()
        else:
            p1 = p50 = p99 = size_p99 = size_max = float("nan")
        print(
            f"| {row['rate']:g} × {row['tokens']} | {row['paired']:,} of {row['ok']:,} | "
            f"{p1:+.2f} / {p50:+.2f} / {p99:+.2f} | {size_p99:.2f} / {size_max:.2f} |"
        )
    print(f"\ntarget: p99 distortion ≤ {TARGET_P99_MS:g} ms (per-gap |client − server| at p99)")
    for row in rows:
        size = np.abs(row["per_gap"]) * 1e3
        size_p99 = float(np.percentile(size, 99)) if size.size else float("nan")
        verdict = "met" if size_p99 <= TARGET_P99_MS else "NOT met"
        print(f"  {row['rate']:g} req/s, peak {row['peak']:,} in flight: {size_p99:.2f} ms: {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--points",
        type=lambda text: [load_point_spec(p) for p in text.split(",")],
        default=[(35.0, 64), (500.0, 16)],
        metavar="RATExTOKENS,…",
        help="load points: constant rate × output tokens per answer (default 35x64,500x16)",
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of sending per load point")
    parser.add_argument("--quick", action="store_true", help="5 s per load point")
    parser.add_argument("--workers", type=int, default=1, help="rampwatch run --workers (default 1)")
    parser.add_argument("--sim-speed", type=float, default=0.1, help="simulated seconds per wall second")
    args = parser.parse_args()
    if args.quick:
        args.duration = 5.0
    if not TINY_MODEL.exists():
        raise SystemExit(f"missing {TINY_MODEL}: run `bash scripts/setup_vllm.sh`")
    print(f"{os.cpu_count()} CPUs, load average {load_average()}")
    print(
        f"answers from a simulated H100 (tiny model) at {args.sim_speed:g}× real time; "
        f"{args.duration:g} s per load point, rampwatch run --workers {args.workers}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="rw-itl-distortion-") as tmp:
        for rate, tokens in args.points:
            row = load_point(args, rate, tokens, Path(tmp))
            print(
                f"  {rate:g} req/s × {tokens} tokens: {row['requests']} requests, peak in flight {row['peak']}, "
                f"wall {row['wall']:.0f} s, load {row['load']}",
                flush=True,
            )
            rows.append(row)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
