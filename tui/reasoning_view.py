"""What a reasoning run adds to the screen (``Snapshot.reasoning``, from
``core.figures.series_reasoning``): its TTFA series beside the run's own for the latency
chart's "TTFT vs first answer" view, the reasoning share in that view's title, and the
stats panel's rows. A plain run has no ``Snapshot.reasoning``: none of this shows."""

from __future__ import annotations

import dataclasses
import math

from rampwatch.core.timeline import Snapshot
from rampwatch.tui.chart_data import current_value, format_ms, format_number

SHARE = "reasoning_share_pct"
# Latencies are over a 10 s window of completions, as the run's own (stats_panel's look-back).
LOOK_BACK_BINS = 2


def has_reasoning(snapshot: Snapshot | None) -> bool:
    return snapshot is not None and snapshot.reasoning is not None


def with_reasoning(snapshot: Snapshot) -> Snapshot:
    """The snapshot with its reasoning series among its series (what a chart reads)."""
    if snapshot.reasoning is None:
        return snapshot
    return dataclasses.replace(snapshot, series={**snapshot.series, **snapshot.reasoning})


def share_now(snapshot: Snapshot) -> float | None:
    """The reasoning share of output tokens (%) over the latest complete window."""
    if snapshot.reasoning is None:
        return None
    value = current_value(with_reasoning(snapshot), SHARE, LOOK_BACK_BINS)
    return None if value is None or math.isnan(value) else value


def share_title(snapshot: Snapshot) -> str:
    """`` · reasoning 62 % of output``, or nothing before a share is known."""
    share = share_now(snapshot)
    return "" if share is None else f" · reasoning {share:.0f} % of output"


def now_rows(snapshot: Snapshot) -> list[tuple[str, str]]:
    """The stats panel's "now" rows of a reasoning run (none otherwise)."""
    if snapshot.reasoning is None:
        return []
    merged = with_reasoning(snapshot)
    share = share_now(snapshot)
    return [
        ("TTFA p50", format_ms(current_value(merged, "ttfa_p50", LOOK_BACK_BINS))),
        ("TTFA p99", format_ms(current_value(merged, "ttfa_p99", LOOK_BACK_BINS))),
        ("reasoning %", "–" if share is None else f"{share:.1f}"),
    ]


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    """The "run so far" rows of a reasoning run's summary (``Summary.reasoning``)."""
    reasoning = summary.get("reasoning")
    if not isinstance(reasoning, dict):
        return []
    share = reasoning.get("reasoning_share")
    return [
        ("TTFA p50 ms", format_number(reasoning.get("p50_ttfa_ms"))),
        ("TTFA p99 ms", format_number(reasoning.get("p99_ttfa_ms"))),
        ("reasoning share %", "–" if share is None else f"{share * 100:.1f}"),
        ("cut short thinking", format_number(reasoning.get("no_answer_requests"))),
    ]
