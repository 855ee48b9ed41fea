"""Recording size, open time (to a first frame), seek time, replay memory, report/export cost.

    python bench/bench_recording.py [--minutes 60] [--rps 100] [--chunks 250] [--keep PATH] [--reuse]

Writes a synthetic recording (1 hour at 100 rps, ~250 chunks per request by default;
model in tests/synthetic.py) with the writer's default seek checkpoints, then measures,
each in a fresh process so that its peak memory is its own: open time = open_recording +
the replay's first snapshot; seek time = seek + snapshot at random positions right after
opening (no warm-up); `rampwatch report` and `rampwatch export --format json`.
``--reuse`` measures an existing ``--keep`` file instead of writing one.
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The synthetic run comes from the test suite (tests/ is not installed).
sys.path.insert(0, str(ROOT))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write(path: Path, minutes: float, rps: float, chunks: float) -> None:
    from rampwatch.record.writer import RecordingWriter
    from tests.synthetic import SyntheticRun, play_synthetic

    run = SyntheticRun(
        duration_s=minutes * 60, start_rps=rps, end_rps=rps, capacity_rps=rps * 1.5, mean_chunks=chunks, seed=1
    )
    writer = RecordingWriter(path, flush_interval_s=None)
    encode_s = 0.0

    def flush(_t: float) -> None:
        nonlocal encode_s
        t0 = time.perf_counter()
        writer.flush()
        encode_s += time.perf_counter() - t0

    t0 = time.perf_counter()
    n = play_synthetic(run, writer, on_flush=flush)
    gen_s = time.perf_counter() - t0
    size = path.stat().st_size
    print(f"recording: {n} requests, {minutes:.0f} min at {rps:.0f} rps, ~{chunks:.0f} chunks/request")
    print(f"  file size            {size / 1e6:8.1f} MB  ({size / max(n, 1):.0f} B/request)")
    print(
        f"  writer encode+write  {encode_s:8.2f} s total, {encode_s / (run.duration_s / 0.5) * 1000:.1f} ms per 0.5 s "
        f"flush, checkpoints included  (generation + encoding {gen_s:.1f} s)"
    )


def measure_replay(path: Path, seeks: int) -> None:
    from rampwatch.record import format as fmt
    from rampwatch.record.reader import open_recording
    from rampwatch.record.replay import ReplayTimeline

    t0 = time.perf_counter()
    rec = open_recording(path)
    t_open = time.perf_counter() - t0
    timeline = ReplayTimeline(rec)
    snap = timeline.snapshot()
    t_first = time.perf_counter() - t0
    cp_bytes = sum(f.length + fmt.FRAME.size for f in rec.checkpoint_frames)
    print(f"  open                 {t_open * 1000:8.1f} ms")
    print(f"  open + first frame   {t_first * 1000:8.1f} ms  (t={snap.t:.1f} s)")
    print(f"  stored checkpoints   {len(rec.checkpoint_frames):8d}  ({cp_bytes / 1e6:.1f} MB of the file)")
    rng = random.Random(0)
    positions = [rng.uniform(0, rec.duration_s) for _ in range(seeks)] + [rec.duration_s]
    times = []
    for pos in positions:
        s0 = time.perf_counter()
        timeline.seek(pos)
        timeline.snapshot()
        times.append(time.perf_counter() - s0)
    print(
        f"  seek right after open median {statistics.median(times) * 1000:7.1f} ms, max {max(times) * 1000:7.1f} ms "
        f"over {len(times)} seeks (random + the end)"
    )
    steps = []
    timeline.seek(rec.duration_s / 2)
    timeline.snapshot()
    for _ in range(10):
        s0 = time.perf_counter()
        timeline.step(0.25)
        timeline.snapshot()
        steps.append(time.perf_counter() - s0)
    print(f"  frame while playing  median {statistics.median(steps) * 1000:7.1f} ms (0.25 s steps)")
    print(f"  replay peak RSS      {_peak_rss_mb():8.0f} MB")


def measure_command(path: Path, command: str) -> None:
    from rampwatch.app.cli import main as cli_main

    out = Path(tempfile.mkdtemp()) / "out.json"
    argv = ["report", str(path)] if command == "report" else ["export", str(path), "--format", "json", "-o", str(out)]
    import contextlib
    import io

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = cli_main(argv)
    dt = time.perf_counter() - t0
    size = f", output {out.stat().st_size / 1e6:.0f} MB" if out.exists() else ""
    print(f"  rampwatch {command:<7}     {dt:8.1f} s, peak RSS {_peak_rss_mb():.0f} MB (exit {rc}{size})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rps", type=float, default=100.0)
    p.add_argument("--chunks", type=float, default=250.0, help="mean chunks per request")
    p.add_argument("--seeks", type=int, default=20)
    p.add_argument("--keep", help="write the recording here instead of a temporary file")
    p.add_argument("--reuse", action="store_true", help="measure the existing --keep file")
    p.add_argument("--skip-commands", action="store_true", help="do not time report/export")
    p.add_argument("--measure", choices=("replay", "report", "export"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        path = Path(args.keep)
        if args.measure == "replay":
            measure_replay(path, args.seeks)
        else:
            measure_command(path, args.measure)
        return 0

    tmp = tempfile.TemporaryDirectory()
    path = Path(args.keep) if args.keep else Path(tmp.name) / "bench.rwrec"
    if not args.reuse:
        write(path, args.minutes, args.rps, args.chunks)
    else:
        print(f"recording: {path} ({path.stat().st_size / 1e6:.1f} MB)")
    measures = ["replay"] + ([] if args.skip_commands else ["report", "export"])
    for what in measures:
        subprocess.run(
            [sys.executable, __file__, "--measure", what, "--keep", str(path), "--seeks", str(args.seeks)],
            check=True,
            cwd=ROOT,
        )
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
