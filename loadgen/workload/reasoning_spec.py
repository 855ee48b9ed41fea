"""A workload's reasoning fields (``workload:`` and each ``workload.mix[]`` class): the
request fields reasoning servers read, sent in every chat request's body as written.

- ``reasoning_effort``: OpenAI's and vLLM's (none, minimal, low, medium, high, xhigh, max;
  vLLM also turns ``enable_thinking`` off for ``none``).
- ``chat_template_kwargs``: a mapping handed to the model's chat template by vLLM, e.g.
  ``{enable_thinking: false}`` (Qwen3) or ``{thinking: true}`` (DeepSeek-V3.1); its keys
  are the template's, so they are not checked beyond being a mapping of names.

Both need ``endpoint: chat`` (completions have no chat template) and may not also be in
``extra_body`` (one place for each field).
"""

from __future__ import annotations

from typing import Any

from rampwatch.loadgen.workload.spec_checks import KeyPath, Problems, choice_check, describe, dotted

REASONING_KEYS = ("reasoning_effort", "chat_template_kwargs")
# vLLM 0.32's ChatCompletionRequest.reasoning_effort values.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def check_reasoning(p: Problems, path: KeyPath, w: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """The reasoning fields a workload sets, checked; problems go to ``p`` at their key."""
    out: dict[str, Any] = {}
    for key in REASONING_KEYS:
        if w.get(key) is None:
            continue
        if endpoint != "chat":
            p.add(path + (key,), f"needs endpoint chat (completions have no chat template), got {endpoint!r}", True)
            continue
        extra = w.get("extra_body")
        if isinstance(extra, dict) and key in extra:
            p.add(path + ("extra_body", key), f"is set by {dotted(path + (key,))} already: set it there only", True)
            continue
        value = w[key]
        if key == "reasoning_effort":
            if p.check(path + (key,), value, choice_check(REASONING_EFFORTS)):
                out[key] = value
        elif not isinstance(value, dict):
            p.add(path + (key,), f"expected a mapping of the chat template's arguments, got {describe(value)}")
        elif not all(isinstance(name, str) and name.isidentifier() for name in value):
            bad = next(name for name in value if not (isinstance(name, str) and name.isidentifier()))
            p.add(path + (key, bad), "expected a template argument's name (letters, digits, _)", True)
        else:
            out[key] = dict(value)
    return out


def reasoning_fields(workload: dict[str, Any]) -> dict[str, Any]:
    """The request body fields of a checked workload's reasoning keys (none when unset)."""
    return {key: workload[key] for key in REASONING_KEYS if key in workload}
