"""Speculative decoding's figures, from vLLM's ``vllm:spec_decode_*`` counters.

vLLM's definitions (``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingLogging``):

- acceptance rate = accepted tokens / draft tokens;
- mean acceptance length = 1 + accepted tokens / drafts (the bonus token, the one the
  target model gives itself every step, counts);
- per-position acceptance = accepted tokens at position i / drafts.

Over a window they are ratios of counter increases (reset-safe, ``core.figures.counters``),
never of the totals. A server that does not speculate exports none of the counters, and
then nothing here shows: ``has_speculation`` is the test every view, summary and export
makes first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rampwatch.core.figures.counters import counter_delta
from rampwatch.core.timeline import ServerSample

DRAFTS, DRAFT_TOKENS, ACCEPTED = "spec_drafts_total", "spec_draft_tokens_total", "spec_accepted_tokens_total"
POSITION_PREFIX = "spec_accepted_pos."  # + the position: a per-position counter's delta key
# The one-second series a speculating run adds (``SeriesBuilder``): acceptance rate (%),
# mean acceptance length and tokens drafted per draft (k, less where the dynamic schedule
# or max_tokens cut a draft), each over the series' window.
SPEC_SERIES_NAMES = ("spec_acceptance_pct", "spec_accept_len", "spec_draft_len")
MAX_POSITIONS_SHOWN = 8  # positions the summary's text lists (the JSON keeps them all)


def has_speculation(sample: ServerSample) -> bool:
    """Whether the server exports speculative decoding's counters (it speculates)."""
    return sample.spec_drafts_total is not None


def acceptance_rate(accepted: float, draft_tokens: float) -> float | None:
    """Accepted / drafted tokens, 0..1; None without a draft token."""
    return accepted / draft_tokens if draft_tokens > 0 else None


def mean_acceptance_length(accepted: float, drafts: float) -> float | None:
    """1 + accepted tokens per draft (tokens one step gives a request); None without a draft."""
    return 1.0 + accepted / drafts if drafts > 0 else None


def per_position_rates(accepted_by_position: Mapping[str, float], drafts: float) -> list[float] | None:
    """Position i's accepted tokens / drafts, positions in order; None without a draft."""
    if drafts <= 0 or not accepted_by_position:
        return None
    positions = sorted(accepted_by_position, key=int)
    return [accepted_by_position[p] / drafts for p in positions]


def position_deltas(prev: ServerSample, cur: ServerSample) -> dict[str, float]:
    """Increase of each position's accepted-token counter between two scrapes of one URL,
    as ``POSITION_PREFIX + position`` keys: a fall or a new ``_created`` means a restart,
    and the increase is then the new value (``counters.counter_delta``)."""
    out: dict[str, float] = {}
    for position, value in cur.spec_accepted_by_position.items():
        d = counter_delta(prev.spec_accepted_by_position.get(position, 0.0), value, prev.created, cur.created)
        if d is not None:
            out[POSITION_PREFIX + position] = d
    return out


def spec_figures(totals: Mapping[str, float]) -> dict[str, Any] | None:
    """The summary's ``speculation`` figures from counter increases over a run (or a part
    of it): ``totals`` holds ``DRAFTS``, ``DRAFT_TOKENS``, ``ACCEPTED`` and the
    ``POSITION_PREFIX`` keys. None when the server did not speculate (no drafts counted)."""
    if DRAFTS not in totals:
        return None
    drafts, draft_tokens = totals.get(DRAFTS, 0.0), totals.get(DRAFT_TOKENS, 0.0)
    accepted = totals.get(ACCEPTED, 0.0)
    by_position = {k.removeprefix(POSITION_PREFIX): v for k, v in totals.items() if k.startswith(POSITION_PREFIX)}
    rate = acceptance_rate(accepted, draft_tokens)
    rates = per_position_rates(by_position, drafts)
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate_pct": None if rate is None else 100.0 * rate,
        "mean_acceptance_length": mean_acceptance_length(accepted, drafts),
        "draft_tokens_per_draft": draft_tokens / drafts if drafts > 0 else None,
        "per_position_acceptance_pct": None if rates is None else [100.0 * r for r in rates],
    }


def _window_sum(a: np.ndarray, window_s: int) -> np.ndarray:
    c = np.concatenate(([0.0], np.cumsum(np.nan_to_num(a))))
    idx = np.arange(1, a.size + 1)
    return c[idx] - c[np.maximum(idx - window_s, 0)]


def spec_series(
    drafts: np.ndarray, draft_tokens: np.ndarray, accepted: np.ndarray, window_s: int
) -> dict[str, np.ndarray]:
    """``SPEC_SERIES_NAMES`` from the per-second counter rates, each second the ratio of
    the increases over the ``window_s`` seconds up to it (NaN where nothing was drafted)."""
    n = drafts.size
    d, t, a = (_window_sum(x, window_s) for x in (drafts, draft_tokens, accepted))
    nan = np.full(n, math.nan)
    return {
        "spec_acceptance_pct": np.divide(100.0 * a, t, out=nan.copy(), where=t > 0),
        "spec_accept_len": np.divide(a, d, out=nan.copy(), where=d > 0) + 1.0,
        "spec_draft_len": np.divide(t, d, out=nan.copy(), where=d > 0),
    }


def _number(value: float | None, fmt: str) -> str:
    return "–" if value is None or not math.isfinite(value) else format(value, fmt)


def positions_text(per_position_pct: Sequence[float] | None) -> str:
    """``81 / 57 / 33 %``: acceptance by draft position (the first ``MAX_POSITIONS_SHOWN``)."""
    if not per_position_pct:
        return "–"
    shown = " / ".join(f"{p:.0f}" for p in per_position_pct[:MAX_POSITIONS_SHOWN])
    more = " …" if len(per_position_pct) > MAX_POSITIONS_SHOWN else ""
    return f"{shown}{more} %"


# Under the speculation rows: why the peak output rate may read below the mean. The peak
# counts chunks a second, as ``vllm bench serve``'s max_output_tokens_per_s does (one token
# a chunk); an accepted draft's chunk carries several tokens.
SPEC_PEAK_NOTE = (
    "(Peak output tok/s counts chunks, as vllm bench serve",
    " does: a chunk of accepted drafts holds several tokens)",
)


def summary_rows(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The summary's speculative-decoding rows, (label, value) as text."""
    return [
        ("Draft acceptance rate (%):", _number(spec.get("acceptance_rate_pct"), ".1f")),
        ("Mean acceptance length:", _number(spec.get("mean_acceptance_length"), ".2f")),
        ("Drafted tokens per draft:", _number(spec.get("draft_tokens_per_draft"), ".2f")),
        ("Acceptance by position:", positions_text(spec.get("per_position_acceptance_pct"))),
        ("Drafts / accepted tokens:", f"{spec.get('drafts', 0):,.0f} / {spec.get('accepted_tokens', 0):,.0f}"),
    ]
