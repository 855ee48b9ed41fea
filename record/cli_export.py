"""`rampwatch export REC --format json|csv|html [-o PATH]`."""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

from rampwatch.core.errors import UserError

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
        choices=("json", "csv", "html"),
        default="json",
        help="json: `vllm bench serve --save-result` schema; csv: <stem>-requests.csv and "
        "<stem>-series.csv; html: offline report with charts (default: json)",
    )
    parser.add_argument(
        "-o", "--output", help="output file (csv: its stem names the two files); default: beside the recording"
    )


def _num(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return v


def write_requests_csv(records, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(REQUEST_COLUMNS)
        for r in records:
            w.writerow(
                [
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
                    r.finish_reason or "",
                    "" if r.status is None else r.status,
                    r.error_class or "",
                    r.error or "",
                    r.scenario_tag or "",
                ]
            )


def write_series_csv(snapshot, path: Path) -> None:
    names = list(snapshot.series)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", *names])
        for i, t in enumerate(snapshot.times):
            w.writerow([_num(t), *(_num(snapshot.series[n][i]) for n in names)])


def _bench_list(recording, info, key: str, summary) -> list:
    """One block's share of a per-request list of ``to_bench_result`` (same values)."""
    import numpy as np

    from rampwatch.loadgen.summary import to_bench_result

    if key == "itls":
        return to_bench_result(summary, None, recording.decode_requests(info))[key]
    c = recording.request_columns(info, with_chunks=False)
    ok = np.array([e is None for e in c.strings["error_class"]], dtype=bool)
    if key == "input_lens":
        return c.prompt_tokens.tolist()
    if key == "output_lens":
        return np.where(ok, np.where(c.completion_tokens == 0, 1, c.completion_tokens), 0).tolist()
    if key == "ttfts":
        ttft = np.where(c.has_first, c.first_token_at - c.sent_at, 0.0)
        return np.where(ok & (ttft != 0.0), ttft, 0.0).tolist()
    if key == "latencies":
        return np.where(ok, c.end_at - c.sent_at, 0.0).tolist()
    if key == "start_times":
        return c.sent_at.tolist()
    if key == "queue_times":
        return np.maximum(0.0, c.sent_at - c.scheduled_at).tolist()
    if key == "generated_texts":
        return [""] * c.n
    if key == "errors":
        return [
            "" if e is None else f"{e}: {msg or ''}" for e, msg in zip(c.strings["error_class"], c.strings["error"])
        ]
    raise KeyError(key)


def write_bench_result(recording, summary, path: Path) -> None:
    """``to_bench_result`` written block by block: the per-request lists (``itls`` holds
    every chunk gap of the run) are never all in memory at once."""
    from rampwatch.loadgen.summary import PER_REQUEST_KEYS, dump_list, to_bench_result

    result = to_bench_result(summary, recording.header, [])
    result["num_prompts"] = recording.request_count
    with open(path, "w") as f:
        f.write("{")
        for i, (key, value) in enumerate(result.items()):
            f.write(("," if i else "") + "\n " + json.dumps(key) + ": ")
            if key not in PER_REQUEST_KEYS:
                f.write(json.dumps(value, default=str, allow_nan=False))
                continue
            f.write("[")
            first = True
            for info in recording.request_frames:
                part = _bench_list(recording, info, key, summary)
                if part:
                    text = dump_list(part)[1:-1].decode()
                    f.write(("" if first else ", ") + text)
                    first = False
            f.write("]")
        f.write("\n}\n")


def main(args: argparse.Namespace) -> int:
    from rampwatch.loadgen.summary import format_summary
    from rampwatch.record.analysis import final_snapshot, summarise
    from rampwatch.record.html_report import render_html
    from rampwatch.record.reader import open_recording

    recording = open_recording(args.recording)
    for warning in recording.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    src = Path(args.recording)
    out = Path(args.output) if args.output else src.with_suffix(f".{args.format}")
    if out.parent and not out.parent.exists():
        raise UserError(f"{out}: output directory {out.parent} does not exist")
    written: list[Path] = []
    try:
        if args.format == "json":
            write_bench_result(recording, summarise(recording), out)
            written.append(out)
        elif args.format == "csv":
            stem = out.with_suffix("")
            req_path = stem.with_name(stem.name + "-requests.csv")
            series_path = stem.with_name(stem.name + "-series.csv")
            write_requests_csv(recording.iter_requests(), req_path)
            write_series_csv(final_snapshot(recording), series_path)
            written += [req_path, series_path]
        else:
            summary = summarise(recording)
            h = recording.header
            page = render_html(
                final_snapshot(recording),
                summary,
                format_summary(summary),
                recording.marks(),
                title=f"rampwatch report: {h.scenario_name}",
                subtitle=f"{h.model} at {h.target} · {recording.duration_s:.0f} s · {recording.request_count} requests · "
                f"recorded with rampwatch {h.rampwatch_version} · {recording.path.name}",
                warnings=recording.warnings,
            )
            out.write_text(page, encoding="utf-8")
            written.append(out)
    except OSError as exc:
        raise UserError(f"{exc.filename or out}: cannot write ({exc.strerror})") from exc
    for p in written:
        print(p)
    return 0
