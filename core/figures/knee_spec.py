"""The knee rule for speculative decoding (``spec_decode``), beside ``core.figures.knee_rules``.

Speculation trades compute for steps: each decode step verifies ``1 + k`` tokens a
request and keeps ``1 + accepted`` of them. While the step is bound by reading the
weights (a small batch) the extra tokens are nearly free and every accepted draft is a
step saved; as the batch grows the step becomes compute bound, the rejected drafts' share
of it is work thrown away, and speculation makes the inter-token latency worse than
without it. Acceptance that falls as the batch grows makes it worse still. Both are the
classic reason to turn speculation off above a batch size, which vLLM 0.32 does with
``num_speculative_tokens_per_batch_size`` in ``--speculative-config``.

The rule holds when the server speculates (its spec-decode series are in the window), the
batch (running) grew at least ``RUNNING_GROWTH``-fold, and either the step time (the
client's ITL p50, one chunk a step) grew ``ITL_GROWTH``-fold or the acceptance rate fell
to ``ACCEPT_FALL`` of its baseline. The advice turns speculation off above the largest
batch (per engine) at which ITL p50 was still within ``SPEC_ITL_OK`` of its baseline.
"""

from __future__ import annotations

import math

import numpy as np

from rampwatch.core.figures.knee_explanation import TITLES, KneeExplanation
from rampwatch.core.figures.knee_window import KneeWindow, ms_text, number_text
from rampwatch.core.figures.server_limits import ServerLimits

RUNNING_GROWTH = 1.3  # the batch grew this many times over (as knee_rules' compute bound)
ITL_GROWTH = 1.5  # the step time (ITL p50) grew this many times over
ACCEPT_FALL = 0.8  # the acceptance rate at or below this share of its baseline has fallen
SPEC_ITL_OK = 1.25  # a batch whose ITL p50 is within this of the baseline: speculation still pays there
DEFAULT_TOP_BATCH = 1024  # the schedule's last range ends here when max_num_seqs is unknown (vLLM's H100 default)


def _paying_batch(w: KneeWindow, itl_baseline: float, engines: int) -> int:
    """The largest batch per engine whose second's ITL p50 stayed within ``SPEC_ITL_OK``
    of the baseline (at least 1)."""
    running, itl = w.get("running"), w.get("itl_p50")
    ok = np.isfinite(running) & np.isfinite(itl) & (itl <= SPEC_ITL_OK * itl_baseline)
    top = float(running[ok].max()) if ok.any() else float(np.nanmin(running)) if np.isfinite(running).any() else 1.0
    return max(1, int(math.floor(top / max(1, engines))))


def spec_decode(w: KneeWindow, limits: ServerLimits) -> KneeExplanation | None:
    acceptance = w.growth("spec_acceptance_pct")
    length = w.growth("spec_accept_len")
    running = w.growth("running")
    if acceptance is None or length is None or running is None or running[1] < RUNNING_GROWTH * running[0]:
        return None
    itl = w.growth("itl_p50")
    slowed = itl is not None and itl[1] >= ITL_GROWTH * itl[0]
    fell = acceptance[1] <= ACCEPT_FALL * acceptance[0]
    if not (slowed or fell):
        return None
    drafted = w.mean(w.recent("spec_draft_len")) or w.mean(w.get("spec_draft_len"))
    k = max(1, round(drafted)) if drafted is not None else None
    parts = [
        f"acceptance {acceptance[0]:.0f}→{acceptance[1]:.0f} %",
        f"accepted length {length[0]:.2f}→{length[1]:.2f}" + (f" of {k} drafted" if k else ""),
        f"running {number_text(running[0])}→{number_text(running[1])}",
    ]
    if itl is not None:
        # a chunk a step, each of the accepted length: what one token costs the client
        parts.append(
            f"ITL p50 {ms_text(itl[0])}→{ms_text(itl[1])} (a token every "
            f"{itl[0] / length[0] * 1000:.1f}→{itl[1] / length[1] * 1000:.1f} ms)"
        )
    if drafted is not None:
        # per request and step: 1 + drafted verified, length kept
        wasted = max(0.0, (1 + drafted - length[1]) / (1 + drafted))
        parts.append(
            f"each step verifies {number_text(1 + drafted)} tokens a request and keeps {length[1]:.1f}: "
            f"{wasted * 100:.0f} % of the batch's verified tokens are rejected drafts"
        )
    baseline_itl = itl[0] if itl is not None else None
    batch = (
        _paying_batch(w, baseline_itl, limits.engines)
        if baseline_itl is not None
        else max(1, int(running[0] / max(1, limits.engines)))
    )
    top = max(limits.max_num_seqs or DEFAULT_TOP_BATCH, batch + 1)
    schedule = f"[[1, {batch}, {k or 'K'}], [{batch + 1}, {top}, 0]]"
    why = "the step time grew with the batch" if slowed else "acceptance fell as the batch grew"
    return KneeExplanation(
        "spec_decode",
        TITLES["spec_decode"],
        ", ".join(parts),
        f'"num_speculative_tokens_per_batch_size": {schedule} in --speculative-config '
        f"(speculation off above {batch} running{' per engine' if limits.engines > 1 else ''})",
        alternatives=(
            "a shorter draft (a smaller num_speculative_tokens) wastes less of each step at high batch",
            "no --speculative-config, when the load runs mostly above that batch",
        ),
        brief=f"speculating at running {number_text(running[1])}: {why}",
    )
