"""`rampwatch compare A.repeats.json B.repeats.json`: two sets of repeated runs
(``record.repeat_set``) compared figure by figure from their per-repeat values: B − A of
the means with Welch's 95 % interval (``core.figures.intervals.welch_interval``); B is
"better" or "worse" only where that interval excludes 0 (and the change is at least 1 %:
else "negligible"), else "within noise"; a set of one repeat has no spread to judge
("too few repeats"). Counts of requests (successful, failed, cancelled) keep their
interval but have no verdict, as in a comparison of two recordings: a count follows the
load's length and drain, not only the server. The rows have the shape of a comparison of two recordings
(``cli_compare.compare_rows``), so the table and ``--json`` read the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rampwatch.core.figures.intervals import CONFIDENCE, welch_interval
from rampwatch.record.repeat_set import RepeatSet

# (figure, label, higher is better (None: a trait of the load, not judged)), in the
# order a comparison of two recordings lists them, then the repeats' own figures.
SET_COMPARED: tuple[tuple[str, str, bool | None], ...] = (
    ("completed", "Successful requests", True),
    ("failed", "Failed requests", False),
    ("cancelled", "Cancelled requests", False),
    ("error_rate_pct", "Error rate (%)", False),
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
    ("max_goodput_rps", "Max good-put (req/s, 10 s)", True),
)
# Counts of requests: interval shown, never judged (a comparison of two recordings has no
# samples for them either, so no verdict; see the module).
COUNTS = frozenset({"completed", "failed", "cancelled"})
NEGLIGIBLE_PCT = 1.0
SET_FOOTER = (
    "B better/worse only where Welch's {confidence:.0%} interval of B − A over the repeats' figures excludes 0 "
    "and the change is at least 1% (else negligible); A and B are the means over each set's repeats; "
    "request counts are not judged (-: they follow the load's length and drain, not only the server)."
)


def _error_rates(values: Mapping[str, Sequence[float]]) -> list[float] | None:
    completed, failed = values.get("completed"), values.get("failed")
    if not completed or not failed or len(completed) != len(failed):
        return None
    return [f / (c + f) * 100.0 for c, f in zip(completed, failed, strict=True) if c + f > 0]


def set_verdict(low: float | None, high: float | None, change_pct: float | None, higher_better: bool | None) -> str:
    """A row's verdict from Welch's interval of B − A (see the module)."""
    if higher_better is None:
        return "-"
    if low is None or high is None:
        return "too few repeats"
    if low <= 0 <= high:
        return "within noise"
    if change_pct is not None and abs(change_pct) < NEGLIGIBLE_PCT:
        return "negligible"
    return "better" if (low > 0) == higher_better else "worse"


def compare_set_rows(a: RepeatSet, b: RepeatSet) -> list[dict[str, Any]]:
    """One row per figure either set has (``compare_rows``'s keys)."""
    values_a, values_b = dict(a.values), dict(b.values)
    for values in (values_a, values_b):
        rates = _error_rates(values)
        if rates:
            values["error_rate_pct"] = tuple(rates)
    rows = []
    for key, label, higher_better in SET_COMPARED:
        xa, xb = values_a.get(key), values_b.get(key)
        if not xa and not xb:
            continue
        va = sum(xa) / len(xa) if xa else None
        vb = sum(xb) / len(xb) if xb else None
        change = None if va is None or vb is None or va == 0 else (vb - va) / abs(va) * 100.0
        interval = welch_interval(xa or (), xb or ())
        low = None if interval is None else interval.low
        high = None if interval is None else interval.high
        judged = interval is not None and key not in COUNTS
        verdict = set_verdict(low, high, change, higher_better) if judged else "-"
        rows.append(
            {
                "key": key,
                "label": label,
                "a": va,
                "b": vb,
                "n_a": len(xa or ()),
                "n_b": len(xb or ()),
                "change_pct": change,
                "delta": None if va is None or vb is None else vb - va,
                "low": low,
                "high": high,
                "confidence": CONFIDENCE,
                "verdict": verdict,
                "better": {"better": "B", "worse": "A"}.get(verdict),
                "higher_is_better": higher_better,
            }
        )
    return rows
