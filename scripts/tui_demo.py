"""Run the rampwatch UI on a synthetic run, for looking at the screens by hand (and in tmux).

python scripts/tui_demo.py                 # live screen, the fake run advancing
python scripts/tui_demo.py --at 95         # live screen frozen 95 s into the run
python scripts/tui_demo.py --no-metrics    # target without /metrics
python scripts/tui_demo.py --replay [--compare]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The fake runs come from the test suite (tests/ is not installed).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rampwatch.tui.app import make_live_app, make_replay_app  # noqa: E402
from tests.tui.fakes import (  # noqa: E402
    AdvancingSource,
    FakeControl,
    FakeReplay,
    FrozenSource,
    fake_comparison,
    fake_snapshot,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--at", type=float, help="freeze the run at this many seconds")
    parser.add_argument("--no-metrics", action="store_true")
    parser.add_argument("--replay", action="store_true")
    parser.add_argument("--compare", action="store_true")
    args = parser.parse_args()
    control = FakeControl()
    if args.replay:
        compare = FrozenSource(fake_snapshot(110.0)) if args.compare else None
        app = make_replay_app(
            FakeReplay(position=args.at or 60.0),
            compare=compare,
            recording="demo.rwrec",
            compare_label="other.rwrec" if compare else None,
            comparison=fake_comparison if compare else None,
        )
    elif args.at is not None:
        app = make_live_app(
            FrozenSource(fake_snapshot(args.at, metrics=not args.no_metrics)), control, recording="runs/demo.rwrec"
        )
    else:
        app = make_live_app(AdvancingSource(metrics=not args.no_metrics), control, recording="runs/demo.rwrec")
    app.run()
    for call in control.calls:
        print(*call)
    return 0


if __name__ == "__main__":
    sys.exit(main())
