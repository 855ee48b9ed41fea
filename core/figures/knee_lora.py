"""The knee rule of a server serving LoRA adapters (``lora_slots``): more distinct adapters
were wanted than the batch may hold (vLLM's ``--max-loras``), so requests for the others
waited for a slot while the server had room for more requests.

It reads the seconds' ``lora_running`` and ``lora_waiting`` (counts of adapters from
``vllm:lora_requests_info``'s labels: those running, and those waiting that are not
running, i.e. wanting a slot) and ``max_lora`` (``core.figures.adapters.LoraSeconds``),
present only where the server exports them. It holds when, in the recent seconds (the
knee's overload, ``KneeWindow.recent``), adapters waited in at least ``WAIT_SHARE`` of
the seconds that carry the figures, and the running adapters sat at ``max_lora`` in at
least ``FULL_SHARE`` of those that waited, while running requests were below a known
batch cap (at the cap, ``batch_cap`` binds first). It comes before the batch cap in
``PRIORITY``: requests held back by their adapter keep running flat below the cap, which
the inferred batch cap would take for one. The advice: ``--max-loras`` raised to the
distinct adapters wanted at once (running + waiting, at the most), at most twice it.
"""

from __future__ import annotations

import numpy as np

from rampwatch.core.figures.knee_explanation import TITLES, KneeExplanation
from rampwatch.core.figures.knee_window import KneeWindow, number_text
from rampwatch.core.figures.server_limits import ServerLimits

WAIT_SHARE = 0.5  # share of the recent seconds (with LoRA figures) in which adapters waited
FULL_SHARE = 0.8  # share of those seconds with the running adapters at max_lora
CAP_FRACTION = 0.95  # running at this share of a known batch cap is at it (knee_rules' own; a test holds them equal)
MIN_SECONDS = 3  # recent seconds with LoRA figures needed before the rule says anything


def waiting_while_adapters_waited(waiting: np.ndarray) -> str | None:
    """The requests waiting over the seconds the rule read (recent, adapters waiting):
    ``first→last``, and the peak when it is above both. Not the window's ends: its first
    second is often before the load, and its last, in a review that ran to the run's
    end, after the drain (a queue of 89 was said ``0→0``)."""
    finite = waiting[np.isfinite(waiting)]
    if not finite.size:
        return None
    first, last, peak = float(finite[0]), float(finite[-1]), float(finite.max())
    text = f"{number_text(first)}→{number_text(last)}"
    return text + (f" (at most {number_text(peak)})" if peak > max(first, last) else "")


def lora_slots(w: KneeWindow, limits: ServerLimits) -> KneeExplanation | None:
    running, waiting, top = w.recent("lora_running"), w.recent("lora_waiting"), w.recent("max_lora")
    known = np.isfinite(running) & np.isfinite(waiting) & np.isfinite(top)
    if int(known.sum()) < MIN_SECONDS:
        return None
    waited = known & (np.nan_to_num(waiting) > 0)
    if waited.sum() < WAIT_SHARE * known.sum():
        return None
    full = waited & (np.nan_to_num(running) >= np.nan_to_num(top))
    if full.sum() < FULL_SHARE * waited.sum():
        return None
    cap = limits.running_cap
    if cap is not None and (w.peak(w.recent("running")) or 0.0) >= CAP_FRACTION * cap:
        return None
    max_lora = int(np.nanmax(top[known]))
    wanted = int(np.nanmax((running + waiting)[known]))
    parts = [
        f"adapters waited for a slot in {int(waited.sum())} of {int(known.sum())} s",
        f"running adapters at --max-loras {max_lora} in {int(full.sum())} of them",
        f"up to {wanted} distinct adapters wanted at once",
    ]
    queue = waiting_while_adapters_waited(w.recent("waiting")[waited])
    if queue:
        parts.append(f"requests waiting {queue}")
    raised = max(max_lora + 1, min(wanted, 2 * max_lora))
    return KneeExplanation(
        "lora_slots",
        TITLES["lora_slots"],
        ", ".join(parts),
        f"--max-loras {raised}",
        alternatives=(
            f"--max-cpu-loras {max(wanted, raised)} (adapters kept in CPU memory swap in faster than from disk)",
            "fewer distinct adapters per replica (route each adapter to fewer replicas)",
        ),
        brief=f"adapters waiting at --max-loras {number_text(max_lora)}",
    )
