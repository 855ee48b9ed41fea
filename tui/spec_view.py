"""What the screen shows of speculative decoding, derived from a Snapshot without Textual:
whether the server speculates (the spec-decode chart, its tab and the Stats rows are
hidden without), and its figures now and over the run so far."""

from __future__ import annotations

from typing import Any

from rampwatch.core.figures.speculation import positions_text
from rampwatch.core.timeline import Snapshot
from rampwatch.tui.chart_data import current_value, format_number, is_present

# The figures are over the series' window already: the newest second's value is "now".
LOOK_BACK_S = 2


def has_spec(snapshot: Snapshot) -> bool:
    """The server exports speculative decoding's counters and they have grown: the spec
    chart, its tab and the Stats rows are shown."""
    return "spec_acceptance_pct" in snapshot.series


def spec_summary(snapshot: Snapshot) -> dict[str, Any] | None:
    return ((snapshot.summary or {}).get("server") or {}).get("speculation")


def _length(value: float | None) -> str:
    return f"{value:.2f}" if is_present(value) else "–"


def spec_now_rows(snapshot: Snapshot) -> list[tuple[str, str]]:
    """The Stats panel's "now" rows: acceptance % and mean acceptance length over the
    series' window; none where the server does not speculate."""
    if not has_spec(snapshot):
        return []
    return [
        ("draft accept %", format_number(current_value(snapshot, "spec_acceptance_pct", LOOK_BACK_S))),
        ("accept length", _length(current_value(snapshot, "spec_accept_len", LOOK_BACK_S))),
    ]


def spec_so_far_rows(snapshot: Snapshot) -> list[tuple[str, str]]:
    """The "run so far" rows: acceptance %, mean acceptance length and by position."""
    spec = spec_summary(snapshot) if has_spec(snapshot) else None
    if not spec:
        return []
    return [
        ("draft accept %", format_number(spec.get("acceptance_rate_pct"))),
        ("accept length", _length(spec.get("mean_acceptance_length"))),
        ("accept by position", positions_text(spec.get("per_position_acceptance_pct"))),
    ]


def spec_legend_note(snapshot: Snapshot) -> str:
    """The chart's bottom line: acceptance by draft position over the run so far."""
    spec = spec_summary(snapshot)
    return f"by position {positions_text(spec.get('per_position_acceptance_pct'))}" if spec else ""
