"""What a run does with the requests still in flight when its schedule ends: the drain
policy (``--drain``, the scenario's ``drain:`` key).

- ``wait``: wait for every one of them, without limit (``vllm bench serve`` does);
- ``cap:SECONDS``: wait at most that long, then cancel what is left;
- ``cancel``: cancel them at once.

Requests the policy cancels are recorded as cancelled (never lost) and, being the plan,
do not make the run interrupted. A stop (``s``, Ctrl-C) still gives in-flight requests
only the stop's grace period, whatever the policy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DRAIN_MODES = ("wait", "cap", "cancel")
DRAIN_SYNTAX = "wait, cap:SECONDS or cancel"


@dataclass(frozen=True, slots=True)
class DrainPolicy:
    mode: str = "wait"  # one of DRAIN_MODES
    cap_s: float | None = None  # the cap of "cap"

    def __str__(self) -> str:
        return f"cap:{self.cap_s:g}" if self.mode == "cap" else self.mode

    @property
    def limit_s(self) -> float | None:
        """How long the drain may last (None: without limit)."""
        return None if self.mode == "wait" else 0.0 if self.mode == "cancel" else self.cap_s

    def describe(self) -> str:
        """One line for the plan shown before a run starts."""
        if self.mode == "cancel":
            return "drain: cancel the requests in flight when the schedule ends"
        if self.mode == "cap":
            return f"drain: at most {self.cap_s:g} s after the schedule, then cancel what is left"
        return "drain: wait for every request in flight"


def parse_drain(text: object) -> DrainPolicy:
    """``wait``, ``cap:SECONDS`` (``cap:30``, ``cap:2.5s``; at most ``MAX_CAP_S``) or
    ``cancel`` (case and spaces around aside); ValueError with what was expected otherwise."""
    value = str(text).strip().lower()
    if value in ("wait", "cancel"):
        return DrainPolicy(value)
    match = _CAP.fullmatch(value)
    if match is not None and float(match.group(1)) <= MAX_CAP_S:
        return DrainPolicy("cap", float(match.group(1)))
    if value.startswith("cap:"):
        raise ValueError(f"expected cap:SECONDS with SECONDS from 0 to {MAX_CAP_S:g} (a day), got {text!r}")
    raise ValueError(f"expected {DRAIN_SYNTAX}, got {text!r}")


# Digits, an optional fraction and s: not Python's float syntax (1_0, 1e20, " 5", inf).
_CAP = re.compile(r"cap:(\d+(?:\.\d+)?)s?")
MAX_CAP_S = 86400.0


def drain_policy_of(options: dict[str, object] | None) -> DrainPolicy:
    """A recording header's drain policy (its ``options``; older recordings: ``wait``)."""
    value = (options or {}).get("drain")
    try:
        return parse_drain(value) if value is not None else DrainPolicy()
    except ValueError:
        return DrainPolicy()
