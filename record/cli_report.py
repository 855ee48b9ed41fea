"""`rampwatch report REC`: the headless summary of a recording, then its timeline (start,
knee, holds, resumes, rate changes, marks, stop) as the HTML report's marks table has it,
and its step table."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", help="a .rwrec file written by `rampwatch run`")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of the table")


def main(args: argparse.Namespace) -> int:
    import json

    from rampwatch.loadgen.steps import STEP_TABLE_NOTE, step_json, step_table_text
    from rampwatch.loadgen.summary import format_summary
    from rampwatch.record.analysis import final_snapshot, format_timeline, summarise, with_knee_explanation
    from rampwatch.record.reader import open_recording, print_warnings

    recording = open_recording(args.recording)
    snapshot = final_snapshot(recording)
    summary = with_knee_explanation(summarise(recording), snapshot)
    steps = snapshot.steps
    if args.json:
        print(json.dumps({**summary.to_dict(), "steps": [step_json(row) for row in steps]}, indent=2, default=str))
    else:
        h = recording.header
        print(
            f"{recording.path}: {h.scenario_name} against {h.target} ({h.model}), {recording.duration_s:.1f} s recorded"
        )
        print(format_summary(summary))
        timeline = format_timeline(recording.events)
        if timeline:
            print(timeline)
        if steps:
            print(f"\nSteps ({STEP_TABLE_NOTE})")
            print(step_table_text(steps))
    return print_warnings(recording, "report")
