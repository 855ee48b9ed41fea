"""A knee's explanation (``KneeExplanation``): which limit, the evidence as numbers, what
to try next, and its stable dict form kept in the knee event, the result JSON and the
sweep table. Worked out by ``core.figures.knee_explain``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.figures.summary import provisional_text

# lora_slots (core.figures.knee_lora) holds only where the server exports vllm:lora_requests_info,
# spec_decode (core.figures.knee_spec) only where it speculates.
PRIORITY = ("kv_full", "lora_slots", "spec_decode", "batch_cap", "token_budget", "client_cap", "compute_bound")
TITLES = {
    "kv_full": "KV cache full",
    "batch_cap": "batch-size cap",
    "token_budget": "token budget",
    "lora_slots": "LoRA adapter slots",
    "client_cap": "client concurrency cap",
    "spec_decode": "speculative decoding at high batch",
    "compute_bound": "compute/bandwidth bound",
    "undetermined": "undetermined",
}


@dataclass(frozen=True)
class KneeExplanation:
    """Which limit, the evidence as numbers, and what to try next (``try_next``, with
    ``try_is`` saying whose argument it is: ``vllm serve``'s or rampwatch's)."""

    limit: str  # one of PRIORITY, or "undetermined"
    title: str
    evidence: str
    try_next: str | None = None
    try_is: str = "engine argument"  # or "rampwatch flag"
    alternatives: tuple[str, ...] = ()
    also: tuple[dict[str, str], ...] = ()  # other limits that held: {"limit", "title", "evidence"}
    # Two hard limits held: which binds first and what that means for the advice.
    conflict: str | None = None
    window: str = ""  # the seconds the rules read: "45 s before the knee, 30 s after"
    # The explanation declared at the knee, when the seconds after it changed the limit
    # or the advice: {"limit", "title", "try"}.
    provisional: dict[str, str | None] | None = None
    # A reasoning run's note on its time to first answer (``knee_rules.reasoning_note``);
    # None otherwise, and then not in ``to_dict``.
    note: str | None = None
    # A few words of the evidence, for another limit's conflict line; not kept.
    brief: str = field(default="", compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The stable form kept in the knee event's data (``explanation``), the result
        JSON and the sweep table (docs/recording-format.md)."""
        note = {} if self.note is None else {"note": self.note}
        return {
            "limit": self.limit,
            "title": self.title,
            "evidence": self.evidence,
            "try": self.try_next,
            "try_is": self.try_is,
            "alternatives": list(self.alternatives),
            "also": [dict(a) for a in self.also],
            "conflict": self.conflict,
            "window": self.window,
            "provisional": dict(self.provisional) if self.provisional else None,
            **note,
        }

    @classmethod
    def from_dict(cls, data: Any) -> KneeExplanation | None:
        """From a knee event's data; None when it holds no explanation (older recordings)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("limit"), str):
            return None
        alternatives = data.get("alternatives")
        also = data.get("also")
        provisional = data.get("provisional")
        return cls(
            limit=data["limit"],
            title=str(data.get("title") or TITLES.get(data["limit"], data["limit"])),
            evidence=str(data.get("evidence") or ""),
            try_next=str(data["try"]) if data.get("try") else None,
            try_is=str(data.get("try_is") or "engine argument"),
            alternatives=tuple(str(a) for a in alternatives) if isinstance(alternatives, list) else (),
            also=tuple({k: str(v) for k, v in a.items()} for a in also if isinstance(a, Mapping))
            if isinstance(also, list)
            else (),
            conflict=str(data["conflict"]) if data.get("conflict") else None,
            window=str(data.get("window") or ""),
            provisional={k: None if v is None else str(v) for k, v in provisional.items()}
            if isinstance(provisional, Mapping)
            else None,
            note=str(data["note"]) if data.get("note") else None,
        )

    def line(self) -> str:
        """One line: ``batch-size cap (running = max_num_seqs 64 …) → try --max-num-seqs 128``."""
        text = f"{self.title} ({self.evidence})"
        if self.try_next:
            text += f" → try {self.try_next}"
        return text

    def lines(self) -> list[str]:
        """The whole explanation, a line per item (the event's detail view, the report)."""
        out = [f"limit: {self.title} [{self.limit}]", f"evidence: {self.evidence}"]
        if self.try_next:
            whose = " (a rampwatch flag, not an engine argument)" if self.try_is == "rampwatch flag" else ""
            out.append(f"try next: {self.try_next}{whose}")
        out.extend(f"or: {a}" for a in self.alternatives)
        out.extend(f"also: {a.get('title', a.get('limit', ''))} ({a.get('evidence', '')})" for a in self.also)
        if self.conflict:
            out.append(self.conflict)
        if self.note:
            out.append(f"note: {self.note}")
        if self.window:
            out.append(f"window: {self.window}")
        if self.provisional:
            out.append(f"at the knee it read: {provisional_text(self.provisional)}")
        return out
