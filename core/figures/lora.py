"""The server's LoRA adapters (vLLM's ``vllm:lora_requests_info``: its running and waiting
adapters and ``max_lora``, ``ServerSample.lora_*``): the summary's ``server.lora``
figures (``lora_figures``), the live view's state (``lora_state``, ``lora_state_text``)
and, per second, the values the knee's rule reads (``LoraSeconds``: ``lora_running``,
``lora_waiting``, ``max_lora``; ``core.figures.knee_lora``). A server without LoRA shows
none of it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from rampwatch.core.timeline import ServerSample

# Adapters named in the summary's list of those that waited for a slot.
MAX_NAMED = 20


def has_lora(sample: ServerSample) -> bool:
    return sample.ok and not sample.is_gpu and sample.max_lora is not None


def waiting_for_slot(sample: ServerSample) -> list[str]:
    """The waiting adapters that are not running: those that want a slot. vLLM lists an
    adapter as waiting whenever one of its requests waits, for whatever reason, so an
    adapter often appears both running and waiting (a full batch, a request admitted in
    the same step)."""
    running = set(sample.lora_running or [])
    return [name for name in sample.lora_waiting or [] if name not in running]


def lora_figures(samples: Sequence[ServerSample]) -> dict[str, Any] | None:
    """The summary's ``server.lora``: ``max_lora`` (the newest), the most adapters running
    and waiting (vLLM's list) in one scrape, the share of scrapes (%) with an adapter
    waiting for a slot (``waiting_for_slot``), and those adapters (the first
    ``MAX_NAMED``); None when no scrape carried LoRA information."""
    read = [s for s in samples if has_lora(s)]
    if not read:
        return None
    read.sort(key=lambda s: s.t)
    waited: OrderedDict[str, None] = OrderedDict()
    with_waiting = 0
    for s in read:
        wanting = waiting_for_slot(s)
        if wanting:
            with_waiting += 1
            for name in wanting:
                if len(waited) < MAX_NAMED:
                    waited[name] = None
    return {
        "max_lora": read[-1].max_lora,
        "max_running_adapters": max(len(s.lora_running or []) for s in read),
        "max_waiting_adapters": max(len(s.lora_waiting or []) for s in read),
        "waiting_scrapes_pct": 100.0 * with_waiting / len(read),
        "adapters_waited": list(waited),
    }


def lora_state(sample: ServerSample | None) -> dict[str, Any] | None:
    """The live view's LoRA line from the newest scrape: running and waiting adapters
    and ``max_lora``; None without."""
    if sample is None or not has_lora(sample):
        return None
    return {
        "t": sample.t,
        "running": list(sample.lora_running or []),
        "waiting": list(sample.lora_waiting or []),
        "max_lora": sample.max_lora,
    }


def lora_state_text(state: Mapping[str, Any], width: int = 60) -> str:
    """``LoRA 2/2 running: sql, chat · waiting: code`` (names cut to ``width``)."""

    def names(values: Sequence[str]) -> str:
        text = ", ".join(values) or "-"
        return text if len(text) <= width else text[: width - 1] + "…"

    top = state.get("max_lora")
    cap = f"/{top:g}" if isinstance(top, (int, float)) else ""
    return (
        f"LoRA {len(state.get('running') or [])}{cap} running: {names(state.get('running') or [])}"
        f" · waiting: {names(state.get('waiting') or [])}"
    )


class LoraSeconds:
    """The newest scrape's LoRA state in each second, for the knee's rules: the counts of
    running adapters and of those waiting for a slot (``waiting_for_slot``), and ``max_lora``. Keeps the last ``keep_s`` seconds."""

    def __init__(self, keep_s: int = 600) -> None:
        self.keep_s = keep_s
        self._by_second: OrderedDict[int, dict[str, float]] = OrderedDict()
        self.latest: ServerSample | None = None

    def add(self, sample: ServerSample) -> None:
        if not has_lora(sample):
            return
        if self.latest is None or sample.t >= self.latest.t:
            self.latest = sample
        second = int(sample.t)
        assert sample.max_lora is not None
        self._by_second[second] = {
            "lora_running": float(len(sample.lora_running or [])),
            "lora_waiting": float(len(waiting_for_slot(sample))),
            "max_lora": float(sample.max_lora),
        }
        self._by_second.move_to_end(second)
        while len(self._by_second) > self.keep_s:
            self._by_second.popitem(last=False)

    def at(self, second: float) -> dict[str, float]:
        """The second's values; {} when no scrape in it carried LoRA information."""
        return self._by_second.get(int(second), {})


def lora_summary_lines(lora: Mapping[str, Any] | None) -> list[str]:
    """The summary's server section's LoRA rows (``vllm bench serve``'s 40-column labels);
    none without LoRA figures."""
    if not lora:
        return []

    def row(label: str, text: str) -> str:
        return f"{label:<40} {text:<10}"

    def number(value: Any, fmt: str) -> str:
        return "n/a" if not isinstance(value, (int, float)) else format(value, fmt)

    waited = ", ".join(lora.get("adapters_waited") or []) or "-"
    return [
        row("LoRA max_lora (--max-loras):", number(lora.get("max_lora"), ".0f")),
        row("Max running adapters:", number(lora.get("max_running_adapters"), ".0f")),
        row("Max waiting adapters:", number(lora.get("max_waiting_adapters"), ".0f")),
        row("Scrapes with adapters wanting a slot %:", number(lora.get("waiting_scrapes_pct"), ".1f")),
        row("Adapters that waited for a slot:", waited if len(waited) <= 60 else waited[:59] + "…"),
    ]


def lora_now_rows(state: Mapping[str, Any] | None, width: int = 24) -> list[tuple[str, str]]:
    """The Stats panel's LoRA rows: adapters running (of ``max_lora``) and waiting, each
    count followed by the names, cut to ``width``; none without LoRA state."""
    if not state:
        return []

    def cell(count: str, values: Sequence[str]) -> str:
        text = count + (f" {','.join(values)}" if values else "")
        return text if len(text) <= width else text[: width - 1] + "…"

    top = state.get("max_lora")
    running = list(state.get("running") or [])
    waiting = list(state.get("waiting") or [])
    cap = f"/{top:g}" if isinstance(top, (int, float)) else ""
    return [("LoRA running", cell(f"{len(running)}{cap}", running)), ("LoRA waiting", cell(str(len(waiting)), waiting))]
