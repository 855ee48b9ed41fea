"""vLLM's ``vllm:lora_requests_info`` read into a sample's ``lora_running``,
``lora_waiting`` and ``max_lora``.

vLLM exports the LoRA state as the labels of one gauge, ``max_lora``,
``running_lora_adapters`` and ``waiting_lora_adapters`` (adapter names joined by
commas), whose value is the time the state was set (``set_to_current_time``). Every
state the server has been in stays on the page as a series of its own, so the newest
value is the current state and the others are history. The names are the server's text:
made printable by the scrape, and here bounded in count and length.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

LORA_INFO = "vllm:lora_requests_info"
MAX_NAMES = 64  # adapters kept per list
MAX_NAME_CHARS = 100  # characters kept per adapter name


def adapter_names(label: str | None) -> list[str]:
    """``"sql,chat"`` -> ``["sql", "chat"]``, at most ``MAX_NAMES``, each cut to ``MAX_NAME_CHARS``."""
    if not label:
        return []
    names = [name.strip()[:MAX_NAME_CHARS] for name in label.split(",")]
    return [name for name in names if name][:MAX_NAMES]


# The largest max_lora read (vLLM's --max-loras is an int; a slot a few GB of adapter
# weights): a label of 1e308 was shown as a 309-digit count.
MAX_LORA_SLOTS = 2**31 - 1


def _count(text: str | None) -> float | None:
    """``max_lora``: a whole number from 0 to ``MAX_LORA_SLOTS``, else None (unread)."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    ok = value is not None and math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_LORA_SLOTS
    return value if ok else None


def lora_fields(samples: Iterable[tuple[str, dict[str, str], float]]) -> dict[str, Any]:
    """``{"lora_running", "lora_waiting", "max_lora"}`` from the page's newest
    ``vllm:lora_requests_info`` series (on a tie, the last on the page); {} when the page
    has none (a server without ``--enable-lora``)."""
    newest: tuple[dict[str, str], float] | None = None
    for name, labels, value in samples:
        if name == LORA_INFO and (newest is None or value >= newest[1]):
            newest = (labels, value)
    if newest is None:
        return {}
    labels = newest[0]
    return {
        "lora_running": adapter_names(labels.get("running_lora_adapters")),
        "lora_waiting": adapter_names(labels.get("waiting_lora_adapters")),
        "max_lora": _count(labels.get("max_lora")),
    }
