"""``fake_snapshot`` of a reasoning model's run: each request thinks ~150 tokens at the
run's ITL before its first answer token, about 60 % of its output."""

from __future__ import annotations

import dataclasses
import math

from rampwatch.core.timeline import Snapshot
from tests.tui.fakes import fake_snapshot

THINKING_TOKENS = 150
SHARE_PCT = 60.0


def fake_reasoning_snapshot(t: float, **kwargs) -> Snapshot:
    snap = fake_snapshot(t, **kwargs)
    series = snap.series

    def after_thinking(q: str) -> list[float]:
        return [a + THINKING_TOKENS * b for a, b in zip(series[f"ttft_{q}"], series[f"itl_{q}"], strict=True)]

    reasoning = {f"ttfa_{q}": after_thinking(q) for q in ("p50", "p90", "p99")}
    reasoning["reasoning_share_pct"] = [
        math.nan if math.isnan(v) else SHARE_PCT + 5 * math.sin(i / 9) for i, v in enumerate(series["ttft_p50"])
    ]
    s = snap.summary
    summary = {
        **s,
        "reasoning": {
            "mean_ttfa_ms": s["mean_ttft_ms"] + THINKING_TOKENS * s["p50_itl_ms"],
            "p50_ttfa_ms": s["p50_ttft_ms"] + THINKING_TOKENS * s["p50_itl_ms"],
            "p99_ttfa_ms": s["p99_ttft_ms"] + THINKING_TOKENS * s["p99_itl_ms"],
            "reasoning_share": SHARE_PCT / 100,
            "no_answer_requests": 3,
        },
    }
    steps = [
        dataclasses.replace(row, ttfa_p99=row.ttft_p99 + THINKING_TOKENS * row.itl_p50 if row.sent else math.nan)
        for row in snap.steps
    ]
    return dataclasses.replace(snap, reasoning=reasoning, summary=summary, steps=steps)
