"""`rampwatch export REC --format json|csv|html|parquet [-o PATH]`."""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import sys
from pathlib import Path

from rampwatch.core.errors import UserError
from rampwatch.core.figures import phases
from rampwatch.core.figures.adapters import adapter_table
from rampwatch.core.figures.summary import format_summary
from rampwatch.core.files import is_special, private_file
from rampwatch.record.analysis import (
    adapter_figures,
    class_figures,
    classes_table,
    configuration_table,
    final_snapshot,
    recording_turns,
    summarise,
    with_knee_explanation,
)
from rampwatch.record.html_report import render_html
from rampwatch.record.reader import open_recording, print_warnings
from rampwatch.record.result_json import write_bench_result

# ``-o -``: the export goes to standard output (json and html; csv and parquet are two files).
STDOUT = "-"
TWO_FILES = ("csv", "parquet")  # a requests table and a series table

REQUEST_COLUMNS = (
    "id",
    "scheduled_at",
    "sent_at",
    "first_token_at",
    "end_at",
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "client_queue_s",
    "n_chunks",
    "prompt_tokens",
    "completion_tokens",
    "tokens_from_usage",
    "finish_reason",
    "status",
    "error_class",
    "error",
    "scenario_tag",
)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", help="a .rwrec file written by `rampwatch run`")
    parser.add_argument(
        "--format",
        choices=("json", "csv", "html", "parquet"),
        default="json",
        help="json: `vllm bench serve --save-result` schema; csv: <stem>-requests.csv and "
        "<stem>-series.csv; html: offline report with charts; parquet: the csv's two tables as "
        "<stem>-requests.parquet and <stem>-series.parquet (needs pip install 'rampwatch[parquet]') "
        "(default: json)",
    )
    parser.add_argument(
        "-o",
        "--output",
        help="output file (csv, parquet: its stem names the two files; json, html: - for standard output), "
        "or a directory to write into, the files named after the recording; default: beside the recording",
    )
    parser.add_argument("--force", action="store_true", help="overwrite output files that already exist")
    parser.add_argument(
        "--save-detailed",
        action="store_true",
        help="json: add the per-request lists (input_lens, output_lens, start_times, ttfts, itls, "
        "generated_texts, errors) as `vllm bench serve --save-detailed` does; recordings hold no "
        "generated texts, so those are empty strings",
    )


def output_paths(recording: Path, fmt: str, output: str | None) -> list[Path]:
    """The files an export writes: one, or two for csv and parquet (``<stem>-requests.csv``,
    ``<stem>-series.csv``). ``-o DIR`` (an existing directory, or a path ending in ``/``):
    inside it, named after the recording, whatever the format."""
    out = Path(output) if output else recording.with_suffix(f".{fmt}")
    if output and (out.is_dir() or output.endswith(("/", os.sep))):
        out = out / recording.with_suffix(f".{fmt}").name
    if fmt not in TWO_FILES:
        return [out]
    stem = out.with_suffix("")
    return [stem.with_name(f"{stem.name}-requests.{fmt}"), stem.with_name(f"{stem.name}-series.{fmt}")]


def check_outputs(recording: Path, outputs: list[Path], force: bool) -> None:
    """An export never writes over the recording it reads, nor over an existing file
    unless ``--force`` says so."""
    for out in outputs:
        if out.resolve() == recording.resolve():
            raise UserError(f"{out}: is the recording being exported; give the export another path (-o)")
        if out.is_dir():
            raise UserError(f"{out}: is a directory")
        if out.exists() and not force and not is_special(out):  # a device or a pipe is written as it is
            raise UserError(f"{out}: exists; pass --force to overwrite it")
        if not out.parent.is_dir():
            raise UserError(f"{out}: output directory {out.parent} does not exist")


def _write_atomically(path: Path, write) -> None:
    """``write(tmp)`` then rename over ``path``: a failed export leaves no half-written
    file. A link is followed (the file it names is replaced, the link kept); a device or
    a pipe (``-o /dev/stdout``) is written as it is, never replaced by a file."""
    target = path.resolve() if path.is_symlink() else path
    if is_special(target):
        try:
            write(target)
        except OSError as exc:
            raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        tmp.unlink(missing_ok=True)


def _write_text(path: Path, text: str) -> None:
    with private_file(path, "w", encoding="utf-8") as f:
        f.write(text)


# A recording keeps times to the microsecond: a difference of two of them printed in
# full reads 7.566339999999999 for 7.56634. Values go out rounded to the µs grid
# (seconds), which every figure of the files is already exact to, or finer.
CSV_DECIMALS = 6


def _num(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(round(v, CSV_DECIMALS))
    return v


# What a spreadsheet reads as the start of a formula (OWASP's list: a tab or CR before
# one is skipped by some), unless the cell is a number such as -5 or +1e3.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def spreadsheet_text(text: str) -> str:
    """A text cell a spreadsheet shows and does not execute: one that would start a
    formula (a server's error message ``=HYPERLINK(…)``) gets a leading ``'``, as
    spreadsheet-safe CSV writers do; the text stays readable after it."""
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


# Columns a recording has only when some request has the field (issue 28's: a plain
# recording's CSV keeps REQUEST_COLUMNS alone, byte for byte): (the group's test, its
# columns, its cells).
def _reasoning_cells(r) -> list:
    from_usage = r.reasoning_from_usage
    return [
        _num(r.first_answer_at),
        _num(r.ttfa),
        "" if r.reasoning_tokens is None else r.reasoning_tokens,
        r.answer_tokens,  # every completion token of a request that did not reason
        "" if from_usage is None else int(from_usage),
    ]


def _phase_cells(r) -> list:
    """Where the request's TTFT went: its marks, then its phases (a request that failed or
    got no token: those it reached, the rest empty)."""
    durations = phases.record_phases(r) or {}
    cut = [_num(durations[n]) if n in durations else "" for n in phases.PHASE_NAMES]
    return [_num(getattr(r, f)) for f in phases.MARK_FIELDS] + cut


OPTIONAL_COLUMNS = (
    (
        lambda r: r.first_answer_at is not None or r.reasoning_tokens is not None,
        ("first_answer_at", "ttfa_s", "reasoning_tokens", "answer_tokens", "reasoning_from_usage"),
        _reasoning_cells,
    ),
    (lambda r: r.adapter is not None, ("adapter",), lambda r: [spreadsheet_text(r.adapter or "")]),
    (lambda r: r.images is not None, ("images",), lambda r: ["" if r.images is None else r.images]),
    (
        lambda r: any(getattr(r, f) is not None for f in phases.MARK_FIELDS),
        (*phases.MARK_FIELDS, *(f"{name}_phase_s" for name in phases.PHASE_NAMES)),
        _phase_cells,
    ),
)
# A mixture's class, before those columns, only with one of them: a mixture's CSV
# without them is pinned as it was (tests/test_pinned_figures.py), with no class column.
CLASS_COLUMN = (
    lambda r: r.request_class is not None,
    ("request_class",),
    lambda r: [spreadsheet_text(r.request_class or "")],
)


def optional_columns(records) -> list:
    """The ``OPTIONAL_COLUMNS`` groups some record has, in order, with the class
    column first when there is one of them and a record has a class (one pass)."""
    groups = (CLASS_COLUMN, *OPTIONAL_COLUMNS)
    present = [False] * len(groups)
    for r in records:
        for i, (has, _, _) in enumerate(groups):
            present[i] = present[i] or has(r)
        if all(present):
            break
    if not any(present[1:]):
        return []
    return [group for group, yes in zip(groups, present) if yes]


def request_cells(r, extra: list) -> list:
    """A request's row as the CSV writes it (the Parquet export reads the same cells)."""
    return [
        r.id,
        _num(r.scheduled_at),
        _num(r.sent_at),
        _num(r.first_token_at),
        _num(r.end_at),
        _num(r.ttft),
        _num(r.e2e),
        _num(r.tpot),
        _num(r.client_queue_s),
        len(r.chunk_times),
        r.prompt_tokens,
        r.completion_tokens,
        int(r.tokens_from_usage),
        spreadsheet_text(r.finish_reason or ""),
        "" if r.status is None else r.status,
        spreadsheet_text(r.error_class or ""),
        spreadsheet_text(r.error or ""),
        spreadsheet_text(r.scenario_tag or ""),
        *(cell for _, _, cells in extra for cell in cells(r)),
    ]


def request_header(extra: list) -> list[str]:
    return [*REQUEST_COLUMNS, *(name for _, names, _ in extra for name in names)]


def write_requests_csv(records, path: Path, extra: list | None = None) -> None:
    """One row a request; ``extra`` (``optional_columns``, from a pass of its own over
    the records) adds the columns of the fields the recording has, after the others."""
    extra = extra or []
    with private_file(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(request_header(extra))
        for r in records:
            w.writerow(request_cells(r, extra))


def _series(snapshot) -> dict:
    return {**snapshot.series, **(snapshot.reasoning or {})}  # a reasoning run's columns last


def series_header(snapshot) -> list[str]:
    """The one-second series' columns, ``t`` first."""
    return ["t", *(spreadsheet_text(n) for n in _series(snapshot))]


def series_rows(snapshot):
    """The one-second series' rows, as the CSV writes them (the Parquet export reads the same cells)."""
    series = list(_series(snapshot).values())
    for i, t in enumerate(snapshot.times):
        yield [_num(t), *(_num(column[i]) for column in series)]


def write_series_csv(snapshot, path: Path) -> None:
    with private_file(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(series_header(snapshot))
        w.writerows(series_rows(snapshot))


def main(args: argparse.Namespace) -> int:

    to_stdout = args.output == STDOUT
    if to_stdout and args.format in TWO_FILES:
        raise UserError(
            f"-o -: a {args.format} export is two files (requests and series); give -o a path whose stem names them"
        )
    if args.format == "parquet":
        from rampwatch.record import parquet_export  # pyarrow only when this export runs

        parquet_export.require_pyarrow()
    recording = open_recording(args.recording)
    src = Path(args.recording)
    outputs = [] if to_stdout else output_paths(src, args.format, args.output)
    check_outputs(src, outputs, args.force)
    if args.format == "json":
        summary = summarise(recording)
        if summary.knee_rps is not None and summary.knee_explanation is None:  # an older recording's knee
            summary = with_knee_explanation(summary, final_snapshot(recording))
        if to_stdout:
            write_bench_result(recording, summary, sys.stdout, args.save_detailed)
        else:
            _write_atomically(outputs[0], lambda tmp: write_bench_result(recording, summary, tmp, args.save_detailed))
    elif args.format == "csv":
        extra = optional_columns(recording.iter_requests())  # a first pass: which fields the requests have
        _write_atomically(outputs[0], lambda tmp: write_requests_csv(recording.iter_requests(), tmp, extra))
        _write_atomically(outputs[1], lambda tmp: write_series_csv(final_snapshot(recording), tmp))
    elif args.format == "parquet":
        extra = optional_columns(recording.iter_requests())
        header = request_header(extra)
        rows = (request_cells(r, extra) for r in recording.iter_requests())
        _write_atomically(outputs[0], lambda tmp: parquet_export.write_requests(tmp, header, rows))
        snapshot = final_snapshot(recording)
        _write_atomically(
            outputs[1], lambda tmp: parquet_export.write_series(tmp, series_header(snapshot), series_rows(snapshot))
        )
    else:
        snapshot = final_snapshot(recording)
        summary = with_knee_explanation(summarise(recording), snapshot)
        h = recording.header
        page = render_html(
            snapshot,
            summary,
            format_summary(summary),
            recording.events,
            title=f"rampwatch report: {h.scenario_name}",
            subtitle=f"{h.model} at {h.target} · {recording.duration_s:.0f} s · {recording.request_count} requests · "
            f"recorded with rampwatch {h.rampwatch_version} · {recording.path.name}",
            warnings=recording.warnings,
            configurations=configuration_table(recording),
            turns=recording_turns(recording),
            classes=classes_table(class_figures(recording)),
            adapters=adapter_table(adapter_figures(recording)),
        )
        if to_stdout:
            sys.stdout.write(page)
        else:
            _write_atomically(outputs[0], lambda tmp: _write_text(tmp, page))
    for path in outputs:  # with -o -, nothing but the export goes to standard output
        print(path)
    return print_warnings(recording, "export")
