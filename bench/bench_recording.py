"""Recording size, open time (to a first frame) and seek time on a synthetic run.

    python bench/bench_recording.py [--minutes 60] [--rps 100] [--chunks 250] [--keep PATH]

Writes a synthetic recording (1 hour at 100 rps, ~250 chunks per request by default;
model in record/synthetic.py), then measures: file size; open time = open_recording +
the replay's first snapshot; the background checkpoint warm-up; seek time = seek +
snapshot at random positions (median and max), once warmed up and, for reference, cold.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from record.reader import open_recording  # noqa: E402
from record.synthetic import SyntheticRun, play_synthetic  # noqa: E402
from record.writer import RecordingWriter  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rps", type=float, default=100.0)
    p.add_argument("--chunks", type=float, default=250.0, help="mean chunks per request")
    p.add_argument("--seeks", type=int, default=20)
    p.add_argument("--keep", help="write the recording here instead of a temporary file")
    args = p.parse_args()

    tmp = tempfile.TemporaryDirectory()
    path = Path(args.keep) if args.keep else Path(tmp.name) / "bench.rwrec"
    run = SyntheticRun(duration_s=args.minutes * 60, start_rps=args.rps, end_rps=args.rps,
                       capacity_rps=args.rps * 1.5, mean_chunks=args.chunks, seed=1)
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
    print(f"recording: {n} requests, {args.minutes:.0f} min at {args.rps:.0f} rps, ~{args.chunks:.0f} chunks/request")
    print(f"  file size            {size / 1e6:8.1f} MB  ({size / max(n, 1):.0f} B/request)")
    print(f"  writer encode+write  {encode_s:8.2f} s total, {encode_s / (run.duration_s / 0.5) * 1000:.1f} ms per 0.5 s flush"
          f"  (generation + encoding {gen_s:.1f} s)")

    t0 = time.perf_counter()
    rec = open_recording(path)
    t_open = time.perf_counter() - t0
    timeline = rec.replay()
    snap = timeline.snapshot()
    t_first = time.perf_counter() - t0
    print(f"  open                 {t_open * 1000:8.1f} ms")
    print(f"  open + first frame   {t_first * 1000:8.1f} ms  (t={snap.t:.1f} s)")

    rng = random.Random(0)
    positions = [rng.uniform(0, rec.duration_s) for _ in range(args.seeks)]

    def seeks(tl, label: str) -> None:
        times = []
        for pos in positions:
            s0 = time.perf_counter()
            tl.seek(pos)
            tl.snapshot()
            times.append(time.perf_counter() - s0)
        print(f"  seek ({label:<6})        median {statistics.median(times) * 1000:7.1f} ms, "
              f"max {max(times) * 1000:7.1f} ms over {len(times)} random seeks")

    t0 = time.perf_counter()
    timeline.wait_warm()
    print(f"  warm-up (background) {time.perf_counter() - t0 + t_first:8.1f} s after open, "
          f"{timeline.checkpoint_count} checkpoints every {timeline.checkpoint_every_s:.0f} s")
    seeks(timeline, "warm")
    import resource

    print(f"  peak RSS             {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:8.0f} MB "
          f"(includes the checkpoints; the generator ran in this process too)")
    cold = rec.replay(warm_up=False)
    few = positions[:3]
    times = []
    for pos in few:
        s0 = time.perf_counter()
        cold.seek(pos)
        cold.snapshot()
        times.append(time.perf_counter() - s0)
    print(f"  seek (cold, no warm-up) first three: {', '.join(f'{x * 1000:.0f} ms' for x in times)}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
