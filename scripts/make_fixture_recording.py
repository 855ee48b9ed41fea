"""Write the small committed recording fixture (deterministic): a 60 s ramp from 1 to
20 rps against a server saturating near 14 rps, with scrapes, a knee and a user mark.

    python scripts/make_fixture_recording.py [OUT]   # default: tests/data/small.rwrec
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The synthetic run comes from the test suite (tests/ is not installed).
sys.path.insert(0, str(ROOT))

from rampwatch.record.writer import RecordingWriter  # noqa: E402
from tests.synthetic import SyntheticRun, play_synthetic  # noqa: E402

FIXTURE_RUN = SyntheticRun(
    duration_s=60.0,
    start_rps=1.0,
    end_rps=20.0,
    capacity_rps=14.0,
    mean_chunks=40.0,
    seed=7,
    marks=[(30.0, "steady before the knee")],
    scenario_name="fixture-ramp",
)


def write_fixture(out: Path) -> int:
    writer = RecordingWriter(out, flush_interval_s=None)
    return play_synthetic(FIXTURE_RUN, writer, on_flush=lambda _t: writer.flush())


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else ROOT / "tests" / "data" / "small.rwrec"
    out.parent.mkdir(parents=True, exist_ok=True)
    n = write_fixture(out)
    print(f"wrote {out} ({out.stat().st_size} bytes, {n} requests)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
