"""`rampwatch replay REC [--compare B]`: a recording in the live screens."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rampwatch.core.errors import UserError
from rampwatch.core.timeline import Snapshot
from rampwatch.record.analysis import comparison_samples, summarise
from rampwatch.record.cli_compare import compare_rows, load_warning, shared_cache_warning
from rampwatch.record.reader import open_recording, print_warnings
from rampwatch.record.replay import ReplayTimeline
from rampwatch.tui.app import make_replay_app


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", metavar="REC", help="recording to replay (.rwrec)")
    parser.add_argument(
        "--compare", metavar="B", help="another recording drawn dimmed on the same charts, aligned at the start"
    )
    parser.add_argument("--speed", type=float, default=1.0, help="playback speed, 1 to 16 (default 1)")
    parser.add_argument("--start", type=float, default=0.0, metavar="SECONDS", help="start at this position")
    parser.add_argument("--paused", action="store_true", help="open paused (space plays)")
    parser.add_argument(
        "--no-mouse",
        action="store_true",
        help="leave the mouse to the terminal, so text can be selected (over SSH too); c toggles it",
    )


def _open(path: str) -> ReplayTimeline:
    if not Path(path).exists():
        raise UserError(f"{path}: no such recording")
    return ReplayTimeline(open_recording(path))


def comparison_of(path_a: str, path_b: str) -> Callable[[], tuple[list[dict[str, Any]], str | None]]:
    """What the compare panel shows: `rampwatch compare A B`'s rows and its warnings
    (different loads, a shared prefix cache) on one line.
    Called in the app's worker thread, on readers of its own (the replay's stay its own)."""

    def compare() -> tuple[list[dict[str, Any]], str | None]:
        recordings = [open_recording(path_a), open_recording(path_b)]
        try:
            summaries = [summarise(rec).to_dict() for rec in recordings]
            samples = [comparison_samples(rec) for rec in recordings]
            headers = [rec.header for rec in recordings]
        finally:
            for rec in recordings:
                rec.close()
        warnings = (
            load_warning(*(h.scenario if h is not None else None for h in headers)),
            shared_cache_warning(*headers),
        )
        warning = " ".join(w for w in warnings if w) or None
        return compare_rows(summaries[0], summaries[1], samples[0], samples[1]), warning

    return compare


class FinalSnapshot:
    """A whole recording as one still snapshot (the comparison run is drawn complete)."""

    def __init__(self, timeline: ReplayTimeline) -> None:
        self.recording = timeline.recording
        timeline.seek(timeline.duration)
        self._snapshot = timeline.snapshot()

    def snapshot(self) -> Snapshot:
        return self._snapshot


def main(args: argparse.Namespace) -> int:
    if not 1.0 <= args.speed <= 16.0:
        raise UserError(f"--speed {args.speed:g}: must be between 1 and 16")
    timeline = _open(args.recording)
    compare = FinalSnapshot(_open(args.compare)) if args.compare else None
    timeline.speed = args.speed
    if args.start:
        timeline.seek(args.start)
    if not args.paused:
        timeline.play()
    if not sys.stdout.isatty():
        raise UserError("replay needs a terminal (use `rampwatch report` or `rampwatch export` for text)")
    app = make_replay_app(
        timeline,
        compare=compare,
        recording=args.recording,
        compare_label=args.compare,
        comparison=comparison_of(args.recording, args.compare) if args.compare else None,
        mouse=not args.no_mouse,
    )
    app.run(mouse=not args.no_mouse)
    recordings = [timeline.recording] + ([compare.recording] if compare is not None else [])
    return max(print_warnings(recording, "replay") for recording in recordings)
