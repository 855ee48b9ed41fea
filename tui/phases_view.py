"""Where TTFT went, live: the stats panel's "run so far" rows from the summary's
``ttft_phases`` (``core.figures.phases``). The client's own share (waiting for a
connection slot, opening connections, writing the request) beside the server's (until its
headers came, then until the first token), so a TTFT that grew while connections were set
up or a gateway queued reads apart from one that grew in the engine's queue. A run
without phase marks (an older recording's replay) shows none of it."""

from __future__ import annotations

from typing import Any

from rampwatch.tui.chart_data import format_number

# (label, the phases whose means it adds)
ROWS = (
    ("TTFT connecting ms", ("slot", "dns", "connect", "send")),
    ("TTFT to headers ms", ("headers",)),
    ("TTFT headers→token ms", ("first_token",)),
)


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """Mean milliseconds per group of phases (they add up to the mean TTFT)."""
    phases = summary.get("ttft_phases")
    if not isinstance(phases, dict):
        return []
    rows = []
    for label, names in ROWS:
        values = [phases.get(f"mean_{name}_ms") for name in names]
        numbers = [float(v) for v in values if isinstance(v, (int, float))]
        total = sum(numbers) if len(numbers) == len(values) else None
        rows.append((label, format_number(total)))
    return rows
