"""A reasoning model: with ``--reasoning-parser NAME`` (vLLM's flag) a chat answer streams
its thinking first, as ``delta.reasoning`` chunks (``--reasoning-field
reasoning_content``: the older spelling), then the answer as ``delta.content``.

How much it thinks: a request's ``reasoning_effort`` (vLLM's values: none, minimal, low,
medium, high, xhigh, max) scales ``--reasoning-tokens`` (the mean at ``medium``, the
default effort); ``reasoning_effort: none`` or ``chat_template_kwargs.enable_thinking:
false`` turns the thinking off, as vLLM's chat templates read them (any other value by
its truth, never refused: ``thinking_enabled``); each request's
figure is drawn around its mean (uniform, ±50 %, seeded by ``--seed``), and
``thinking_token_budget`` caps it. The thinking is part of ``max_tokens`` and of
``completion_tokens``, as in vLLM, so a short ``max_tokens`` cuts an answer short while
it thinks. The end-of-thinking marker (``</think>``) is not modelled as a token of its
own. Completions never think (vLLM's reasoning parsers read chat answers only).

Usage: vLLM 0.32 puts ``completion_tokens_details.reasoning_tokens`` in every chat
usage once a reasoning parser runs (``_include_reasoning_tokens_details`` in its chat
serving), 0 for an answer that did not think; so does the simulator, unless
``--no-reasoning-usage`` (a server that does not report it). ``include_reasoning:
false`` drops the thinking chunks from the stream, as vLLM does; usage still counts them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from rampwatch.core.errors import UserError

# vLLM's reasoning_effort values, as multiples of the mean thinking at "medium".
EFFORT_SCALE = {"none": 0.0, "minimal": 0.0625, "low": 0.25, "medium": 1.0, "high": 4.0, "xhigh": 8.0, "max": 16.0}
DEFAULT_EFFORT = "medium"
DEFAULT_REASONING_TOKENS = 1024
REASONING_FIELDS = ("reasoning", "reasoning_content")
SPREAD = 0.5  # each request's thinking: its mean times uniform(1 - SPREAD, 1 + SPREAD)


@dataclass(frozen=True, slots=True)
class ReasoningConfig:
    """``--reasoning-parser`` and the simulator's knobs of the thinking it streams."""

    parser: str
    tokens: int = DEFAULT_REASONING_TOKENS  # the mean thinking at medium effort
    field: str = "reasoning"
    usage_details: bool = True

    def validate(self) -> None:
        if not self.parser:
            raise UserError("--reasoning-parser: give the parser's name (the simulator accepts any)")
        if self.tokens < 0:
            raise UserError(f"--reasoning-tokens {self.tokens}: must be >= 0")
        if self.field not in REASONING_FIELDS:
            raise UserError(f"--reasoning-field {self.field!r}: valid values: {', '.join(REASONING_FIELDS)}")

    def argv(self) -> list[str]:
        """The ``rampwatch sim`` flags that give this configuration."""
        out = ["--reasoning-parser", self.parser, "--reasoning-tokens", str(self.tokens)]
        if self.field != "reasoning":
            out += ["--reasoning-field", self.field]
        if not self.usage_details:
            out.append("--no-reasoning-usage")
        return out


class RequestProblem(ValueError):
    """A reasoning field of a request that vLLM refuses: (message, parameter, value)."""

    def __init__(self, message: str, param: str, value: Any) -> None:
        super().__init__(message)
        self.param = param
        self.value = value


@dataclass(frozen=True, slots=True)
class Thinking:
    """One chat request's thinking: how many tokens, and whether they are streamed."""

    tokens: int
    shown: bool = True


def thinking_enabled(value: Any) -> bool:
    """``chat_template_kwargs.enable_thinking`` as vLLM reads it: any JSON value is taken
    (never a 400), by its truth, as its reasoning parsers do (Qwen3's: ``not
    chat_kwargs.get("enable_thinking", True)`` turns the parsing off) and as a chat
    template's ``{% if enable_thinking %}`` (Jinja truthiness) does: ``"no"`` and
    ``"false"`` are non-empty strings, so on; ``""``, ``0`` and ``null`` are off."""
    return bool(value)


def mean_tokens(config: ReasoningConfig, body: dict[str, Any]) -> float:
    """The mean thinking a request asks for; raises ``RequestProblem`` as vLLM refuses."""
    effort = body.get("reasoning_effort")
    # not a string (a mapping, a list: unhashable) is refused the same, never a 500
    if effort is not None and (not isinstance(effort, str) or effort not in EFFORT_SCALE):
        raise RequestProblem(
            f"reasoning_effort must be one of {', '.join(EFFORT_SCALE)}, got {effort!r}.", "reasoning_effort", effort
        )
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise RequestProblem("chat_template_kwargs must be an object.", "chat_template_kwargs", kwargs)
    if kwargs and "enable_thinking" in kwargs and not thinking_enabled(kwargs["enable_thinking"]):
        return 0.0
    return config.tokens * EFFORT_SCALE[effort or DEFAULT_EFFORT]


def thinking_of(config: ReasoningConfig, body: dict[str, Any], rng: random.Random) -> Thinking:
    """A chat request's thinking, drawn around its mean."""
    mean = mean_tokens(config, body)
    tokens = round(mean * rng.uniform(1 - SPREAD, 1 + SPREAD)) if mean else 0
    budget = body.get("thinking_token_budget")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise RequestProblem(
                f"thinking_token_budget must be a non-negative integer, got {budget!r}.",
                "thinking_token_budget",
                budget,
            )
        tokens = min(tokens, budget)
    return Thinking(tokens, body.get("include_reasoning", True) is not False)


def usage_details(config: ReasoningConfig | None, thinking_tokens: int) -> bytes:
    """The streamed usage's ``completion_tokens_details`` (vLLM's place: after
    ``prompt_tokens_details``), or nothing when the server does not report it."""
    if config is None or not config.usage_details:
        return b""
    return b',"completion_tokens_details":{"reasoning_tokens":%d}' % thinking_tokens


def thinking_head(config: ReasoningConfig, prefix: bytes) -> bytes:
    """The bytes before a thinking word in its chunk (the answer's head with the field)."""
    return prefix + b'[{"index":0,"delta":{"%s":"' % config.field.encode()
