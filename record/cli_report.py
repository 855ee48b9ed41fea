"""`rampwatch report REC`: the headless summary of a recording, then its timeline (start,
knee, holds, resumes, rate changes, marks, restarts, stop) as the HTML report's marks
table has it, the configurations side by side when the server was restarted, the
figures by turn index of a session workload, a mixture's classes side by side, and its
step table."""

from __future__ import annotations

import argparse
import sys

from rampwatch.core import strict_json
from rampwatch.core.figures.adapters import ADAPTER_NOTE, adapter_table
from rampwatch.core.figures.classes import CLASS_NOTE
from rampwatch.core.figures.search import holds_text, search_result, search_section
from rampwatch.core.figures.segments import SEGMENT_NOTE
from rampwatch.core.figures.steps import STEP_TABLE_NOTE, step_json, step_table_text
from rampwatch.core.figures.summary import format_summary
from rampwatch.core.figures.turns import TURNS_NOTE, turn_sections
from rampwatch.core.text import fill_to, fit_lines, terminal_width
from rampwatch.record.analysis import (
    adapter_figures,
    class_figures,
    classes_table,
    configuration_segments,
    configuration_table,
    final_snapshot,
    format_timeline,
    recording_turns,
    summarise,
    with_knee_explanation,
)
from rampwatch.record.cli_compare import cache_policy, describe_policy
from rampwatch.record.reader import open_recording, print_warnings


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "recording", help="a .rwrec file written by `rampwatch run` (or the REC.repeats.json of `run --repeats`)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON instead of the table")


def main(args: argparse.Namespace) -> int:
    from rampwatch.record.repeat_set import is_set_file, report_set

    if is_set_file(args.recording):  # `run --repeats`' set: its figures as mean ± interval
        return report_set(args.recording, args.json)
    recording = open_recording(args.recording)
    snapshot = final_snapshot(recording)
    summary = with_knee_explanation(summarise(recording), snapshot)
    steps = snapshot.steps
    turns = recording_turns(recording)
    classes = class_figures(recording)
    adapters = adapter_figures(recording)
    if args.json:
        out = {
            **summary.to_dict(),
            "cache": cache_policy(recording.header),  # the run's seed and prefix-cache policy
            "steps": [step_json(row) for row in steps],
        }
        segments, summaries = configuration_segments(recording)
        if len(segments) > 1:
            out["configurations"] = [
                {
                    "label": seg.label,
                    "start_s": seg.start_s,
                    "end_s": seg.end_s,
                    "command": seg.command,
                    "diff": [list(row) for row in seg.diff],
                    "resume": seg.resume,
                    **figures.to_dict(),
                }
                for seg, figures in zip(segments, summaries, strict=True)
            ]
        out.update(turn_sections(turns))
        if classes:  # a mixture: each class's figures in the same schema
            out["per_class"] = {name: figures.to_dict() for name, figures in classes.items()}
        if adapters:  # LoRA adapters: each one's figures in the same schema
            out["per_adapter"] = {name: figures.to_dict() for name, figures in adapters.items()}
        out.update(search_section(recording.events))
        print(strict_json.dumps(out, indent=2, default=str))
    else:
        h = recording.header
        width = terminal_width(sys.stdout)  # a terminal's: lines and tables wrap whole words, never mid-word
        first = (
            f"{recording.path}: {h.scenario_name} against {h.target} ({h.model}), {recording.duration_s:.1f} s recorded"
        )
        print(fit_lines(first, width))
        print(fit_lines(describe_policy(h), width))
        print(fit_lines(format_summary(summary), width))
        timeline = format_timeline(recording.events)
        if timeline:
            print(fit_lines(timeline, width))
        configurations = configuration_table(recording)
        if configurations is not None:
            print("\n" + fill_to(f"Configurations ({SEGMENT_NOTE})", width))
            print(configurations.text(width))
        if turns is not None:
            print("\n" + fill_to(f"Turns ({TURNS_NOTE})", width))
            print(turns.text())
        table = classes_table(classes)
        if table is not None:
            print("\n" + fill_to(f"Classes ({CLASS_NOTE})", width))
            print(table.text(width))
        table = adapter_table(adapters)
        if table is not None:
            print("\n" + fill_to(f"Adapters ({ADAPTER_NOTE})", width))
            print(table.text(width))
        searched = search_result(recording.events)
        if searched is not None:  # rampwatch search: its answer and holds
            print("\n" + fill_to(str(searched.get("line") or "search: no answer line recorded"), width))
            print("\n".join(holds_text(searched)))
        if steps:
            print("\n" + fill_to(f"Steps ({STEP_TABLE_NOTE})", width))
            print(step_table_text(steps, width))
    return print_warnings(recording, "report")
