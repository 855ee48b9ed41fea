"""The end of a run: its final figures (read back from its recording), the summary, the
result JSON and the exit code. Shared by the headless and the live paths."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rampwatch.app.session.build import PreparedRun
from rampwatch.app.session.server import print_server_tail
from rampwatch.core.errors import ServerExited, UserError
from rampwatch.core.figures.adapters import ADAPTER_NOTE, adapter_table
from rampwatch.core.figures.classes import CLASS_NOTE, class_table
from rampwatch.core.figures.search import holds_text, search_result
from rampwatch.core.figures.summary import (
    Summary,
    format_summary,
    summarise_requests,
)
from rampwatch.core.figures.turns import TURNS_NOTE, TurnTable
from rampwatch.core.text import fill_to, fit_lines, terminal_width
from rampwatch.loadgen.run.result import RunResult
from rampwatch.loadgen.server.managed import server_log_path
from rampwatch.record.analysis import adapter_figures, class_figures, recording_turns, summarise
from rampwatch.record.reader import Recording, open_recording
from rampwatch.record.result_json import write_bench_result, write_records_result

# A run stopped before its schedule's end (Ctrl-C, the UI's stop or quit) or whose
# in-flight requests were cancelled exits with the shell's code for a SIGINT stop; the
# summary and files are still written.
INTERRUPTED_EXIT = 130


# The server the run started (--serve, or the embedded simulator) exited on its own.
SERVER_EXITED_EXIT = ServerExited.exit_code
# ``error`` events' data keys of what stopped the run from inside the client (said on stderr)
_STOPPED_FROM_INSIDE = frozenset({"load_worker_lost", "request_builder_lost", "request_build_failed"})


@dataclass
class FinalFigures:
    """What the end of a run prints and writes (``final_figures``)."""

    summary: Summary
    turns: TurnTable | None
    classes: dict[str, Summary]
    recording: Recording | None = None  # read back: the result JSON streams from it
    note: str | None = None  # why the figures are not the exact ones
    unreadable: str | None = None  # the recording was written but could not be read back


def final_figures(prepared: PreparedRun, result: RunResult) -> FinalFigures:
    """The run's final figures: from its recording, streamed block by block through the
    code `rampwatch report` uses (so the two agree by construction, exact percentiles as
    vLLM bench computes them), whether or not the run also kept its records in RAM
    (``RunOptions.keep_records``: for tests and embedders, never the figures' source); when
    the recording failed or cannot be read, the live run-so-far summary (bounded:
    percentiles within a 1 % bucket), said so."""
    config = prepared.config
    path = prepared.records_path
    unreadable = None  # a recording that failed is said by its own line (finish_run)
    if path is not None and result.recording_error is None:
        try:
            recording = open_recording(path)
            summary = summarise(recording, slo=prepared.run.scenario.slo, gpu_price_per_hour=config.gpu_price_per_hour)
            return FinalFigures(summary, recording_turns(recording), class_figures(recording), recording)
        except (UserError, OSError) as exc:
            unreadable = str(exc)
    summary = result.live_summary or summarise_requests(result.header, [], [], result.events)
    return FinalFigures(
        summary, None, {}, note="live figures: percentiles within 1 %, not exact", unreadable=unreadable
    )


def finish_run(prepared: PreparedRun, result: RunResult, out: TextIO = sys.stdout) -> int:
    """Summary, result JSON, exit code. Shared by the headless and the TUI paths."""
    try:
        return _finish_run(prepared, result, out)
    finally:
        prepared.remove_scratch()
        if prepared.outputs is not None:
            prepared.outputs.release()


def _finish_run(prepared: PreparedRun, result: RunResult, out: TextIO) -> int:
    figures = final_figures(prepared, result)
    try:
        return _report_run(prepared, result, figures, out)
    finally:
        if figures.recording is not None:
            figures.recording.close()


def write_result_json(prepared: PreparedRun, result: RunResult, figures: FinalFigures) -> str | None:
    """The run's result JSON (if it has one); why it could not be written, else None."""
    path, config = prepared.result_json_path, prepared.config
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        detailed = config.detailed
        if figures.recording is not None:  # the per-request lists streamed from the recording
            write_bench_result(figures.recording, figures.summary, path, detailed, result.generated_texts)
        else:
            # the live figures: no per-request lists (the records are in the unreadable recording)
            write_records_result(result.header, [], figures.summary, path, detailed, turns=figures.turns)
    except OSError as exc:  # e.g. the disk filled up during the run: the summary stands
        return str(exc.strerror or exc)
    return None


def _report_run(prepared: PreparedRun, result: RunResult, figures: FinalFigures, out: TextIO) -> int:
    config = prepared.config
    summary, turns, classes = figures.summary, figures.turns, figures.classes
    # Written before anything is printed: a reader of the output that leaves early
    # (`| head`) ends the printing, never the run's files.
    result_json_error = write_result_json(prepared, result, figures)
    width = terminal_width(out)  # a terminal's: lines and tables wrap whole words, never mid-word
    print(fit_lines(format_summary(summary), width), file=out)
    if figures.note is not None:
        print(fit_lines(f"({figures.note})", width), file=out)
    if turns is not None:
        print(f"\n{fill_to(f'Turns ({TURNS_NOTE})', width)}\n{turns.text()}", file=out)
    if classes:  # a mixture: its classes side by side, as `rampwatch report` prints them
        table = class_table({name: s.to_dict() for name, s in classes.items()})
        print(f"\n{fill_to(f'Classes ({CLASS_NOTE})', width)}\n{table.text(width)}", file=out)
    adapters = adapter_table(adapter_figures(figures.recording)) if figures.recording is not None else None
    if adapters is not None:  # LoRA adapters side by side, as `rampwatch report` prints them
        print(f"\n{fill_to(f'Adapters ({ADAPTER_NOTE})', width)}\n{adapters.text(width)}", file=out)
    searched = search_result(result.events)  # rampwatch search: its answer, under the summary
    if searched is not None:
        print(f"\n{fill_to(str(searched['line']), width)}", file=out)
        print("\n".join(holds_text(searched)), file=out)
    code = 0
    if result_json_error is not None:
        print(f"rampwatch run: cannot write {prepared.result_json_path}: {result_json_error}", file=sys.stderr)
        code = 1
    elif prepared.result_json_path is not None:
        print(f"result JSON: {prepared.result_json_path}", file=out)
    if prepared.recording_path is not None:
        print(f"recording: {prepared.recording_path}", file=out)
    for event in result.events:  # what stopped the run from inside the client: said, not only recorded
        if event.kind == "error" and _STOPPED_FROM_INSIDE & set(event.data or {}):
            print(f"rampwatch run: {event.message}", file=sys.stderr)
    if result.recording_error is not None:
        if prepared.recording_path is not None:
            what = f"recording {prepared.recording_path}"
        else:
            what = f"the run's scratch recording {prepared.scratch_path} (--no-record)"
        print(f"rampwatch run: {what} failed: {result.recording_error}", file=sys.stderr)
        code = 1
    elif figures.unreadable is not None:
        print(f"rampwatch run: cannot read the run's records back: {figures.unreadable}", file=sys.stderr)
        code = 1
    if prepared.server_exit is not None:
        print_server_tail(prepared.server_exit.tail)
        print(
            f"rampwatch run: {prepared.server_exit} (exit {SERVER_EXITED_EXIT}; "
            f"server log: {prepared.server.log_path if prepared.server is not None else '-'})",
            file=sys.stderr,
        )
        return SERVER_EXITED_EXIT
    if prepared.restart_error is not None:
        if isinstance(prepared.restart_error, ServerExited):
            print_server_tail(prepared.restart_error.tail)
        log: str | Path | None = config.server_log  # where plan_run put the log, also of the restarted server
        if log is None and prepared.recording_path is not None:
            log = server_log_path(prepared.recording_path)
        print(
            f"rampwatch run: the server restart failed: {prepared.restart_error} "
            f"(exit {SERVER_EXITED_EXIT}; server log: {log or '-'})",
            file=sys.stderr,
        )
        return SERVER_EXITED_EXIT
    assert result.counts is not None
    if not result.counts.ended:
        print("rampwatch run: no request was sent", file=sys.stderr)
        return 1
    drained = [e for e in result.events if e.kind == "cancel" and "drain" in e.data]
    if drained:
        cancelled = sum(int(e.data.get("requests", 0)) for e in drained)
        print(
            f"rampwatch run: the drain policy ({drained[0].data['drain']}) cancelled {cancelled:,} request{'' if cancelled == 1 else 's'} still "
            "in flight at its end; the summary counts them as cancelled, not failed",
            file=sys.stderr,
        )
    if result.interrupted:
        print(
            f"rampwatch run: stopped before the end (exit {INTERRUPTED_EXIT}): the summary covers "
            f"{summary.completed:,} completed, {summary.failed:,} failed and {summary.cancelled:,} cancelled requests",
            file=sys.stderr,
        )
        return INTERRUPTED_EXIT
    if config.search is not None:  # its holds above the maximum broke the SLO on purpose
        if searched is None or searched.get("failure"):
            line = str(searched["line"]).removeprefix("search: ") if searched else "the search did not finish"
            print(f"rampwatch search: {line}", file=sys.stderr)
            return 1
        return code
    if result.error_rate > config.max_error_rate:
        print(
            f"rampwatch run: error rate {result.error_rate:.1%} exceeds --max-error-rate {config.max_error_rate:.1%}",
            file=sys.stderr,
        )
        return 1
    return code
