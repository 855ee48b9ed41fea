"""`rampwatch compare A B`: two recordings' summaries side by side, with the change and
which one is better per metric."""

from __future__ import annotations

import argparse
import math
from typing import Any

# (summary key, label, True when higher is better)
COMPARED: list[tuple[str, str, bool]] = [
    ("completed", "Successful requests", True),
    ("failed", "Failed requests", False),
    ("request_throughput", "Request throughput (req/s)", True),
    ("request_goodput", "Request goodput (req/s)", True),
    ("output_throughput", "Output token throughput (tok/s)", True),
    ("total_token_throughput", "Total token throughput (tok/s)", True),
    ("max_output_tokens_per_s", "Peak output throughput (tok/s)", True),
    ("mean_ttft_ms", "Mean TTFT (ms)", False),
    ("median_ttft_ms", "Median TTFT (ms)", False),
    ("p99_ttft_ms", "P99 TTFT (ms)", False),
    ("mean_tpot_ms", "Mean TPOT (ms)", False),
    ("p99_tpot_ms", "P99 TPOT (ms)", False),
    ("mean_itl_ms", "Mean ITL (ms)", False),
    ("median_itl_ms", "Median ITL (ms)", False),
    ("p99_itl_ms", "P99 ITL (ms)", False),
    ("mean_e2el_ms", "Mean E2E latency (ms)", False),
    ("p99_e2el_ms", "P99 E2E latency (ms)", False),
    ("knee_rps", "Knee (req/s)", True),
    ("cost_per_1m_output_tokens", "Cost per 1M output tokens", False),
]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def compare_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per metric present in either summary (``Summary.to_dict()``): values,
    % change B vs A, winner."""
    rows = []
    for key, label, higher_better in COMPARED:
        va, vb = _number(a.get(key)), _number(b.get(key))
        if va is None and vb is None:
            continue
        change = None
        better = None
        if va is not None and vb is not None:
            if va != 0:
                change = (vb - va) / abs(va) * 100.0
            if vb != va:
                better = "B" if (vb > va) == higher_better else "A"
            else:
                better = "="
        rows.append(
            {
                "key": key,
                "label": label,
                "a": va,
                "b": vb,
                "change_pct": change,
                "better": better,
                "higher_is_better": higher_better,
            }
        )
    return rows


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.2f}"


def format_comparison(rows: list[dict[str, Any]], name_a: str, name_b: str) -> str:
    w = max(len(r["label"]) for r in rows) if rows else 10
    lines = [f"A: {name_a}", f"B: {name_b}", "", f"{'metric':<{w}}  {'A':>12}  {'B':>12}  {'change':>9}  better"]
    lines.append("-" * len(lines[-1]))
    for r in rows:
        change = "-" if r["change_pct"] is None else f"{r['change_pct']:+.1f}%"
        arrow = "↑" if r["higher_is_better"] else "↓"
        lines.append(
            f"{r['label']:<{w}}  {_fmt(r['a']):>12}  {_fmt(r['b']):>12}  {change:>9}  "
            f"{r['better'] or '-'} ({arrow} better)"
        )
    return "\n".join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="baseline recording (.rwrec)")
    parser.add_argument("b", metavar="B", help="recording compared with the baseline")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def main(args: argparse.Namespace) -> int:
    import json

    from rampwatch.record.analysis import summarise
    from rampwatch.record.reader import open_recording, print_warnings

    recordings = [open_recording(args.a), open_recording(args.b)]
    rows = compare_rows(*(summarise(rec).to_dict() for rec in recordings))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_comparison(rows, str(recordings[0].path), str(recordings[1].path)))
    return max(print_warnings(rec, "compare") for rec in recordings)
