"""A reasoning model's chat stream: which chunks are thinking and which the answer, and
the record's reasoning fields once the stream is over.

A chat chunk whose ``delta.reasoning`` (vLLM now) or ``delta.reasoning_content`` (older
vLLM, other servers) is a non-empty string is thinking; one whose ``delta.content`` is a
non-empty string is the answer (one chunk may be both: the step that closed the
thinking). TTFT stays the first chunk of any kind, as ``vllm bench serve`` has it; this
adds the time of the first answer chunk and how many completion tokens were thinking.

Cost: ``ReasoningWatch`` looks at a stream's chunks only until its first answer chunk (a
plain chat stream: its role chunk and its first content chunk), with byte patterns as
``sse`` classifies events — a JSON string cannot hold an unescaped ``"``, so
``"reasoning":"`` matches a key, never text. After the answer started it does nothing;
completions streams never have one. Thinking that comes back after the answer started
(interleaved with tool calls) is not watched, so not timed; usage's figure and the
tokenizer's count (over every chunk's thinking text) still count it, the chunk count
does not.

Where ``reasoning_tokens`` comes from (``settle``), first match wins:

1. ``usage.completion_tokens_details.reasoning_tokens`` (vLLM sends it when it runs a
   reasoning parser), ``reasoning_from_usage=True``. A value that is not a token count,
   is larger than the completion tokens, or is smaller than the thinking chunks the
   stream carried, is ignored (the request still succeeds) and the client counts
   instead. The last one is real: vLLM 0.32 counts the tokens between ``<think>`` and
   ``</think>`` of the output, so a model whose chat template puts ``<think>`` in the
   prompt (DeepSeek-R1's) streams its thinking while usage says 0 (the capture
   ``tests/data/vllm-0.32.0-cpu/chat-stream-reasoning.txt``).
2. The run's tokenizer over the stream's thinking text (decoded from the chunks the
   client keeps for a tokenizer, once the stream is over), ``reasoning_from_usage=False``,
   at most the completion tokens usage gave.
3. Without a tokenizer, the thinking chunks (vLLM streams one token per chunk unless
   ``--stream-interval`` or speculative decoding groups them), also
   ``reasoning_from_usage=False``, at most the completion tokens usage gave.

A stream with no thinking chunk keeps ``reasoning_tokens`` and ``first_answer_at`` None,
unless usage says it reasoned (``include_reasoning: false`` hides the thinking but
usage still counts it): then the first answer chunk is ``first_answer_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rampwatch.core.timeline import RequestRecord

_REASONING = b'"reasoning'  # then '":"' (vLLM now) or '_content":"' (the older spelling)
_AFTER_REASONING = b'":"'
_AFTER_REASONING_CONTENT = b'_content":"'
_CONTENT = b'"content":"'
_QUOTE = 34  # a string that closes right after it opened is empty


def delta_parts(payload: bytes) -> tuple[bool, bool]:
    """(thinking, answer) of one chat chunk, from its compact JSON's bytes: whether it
    holds ``"reasoning":"`` or ``"reasoning_content":"`` and whether ``"content":"``,
    each followed by a non-empty string: either spelling's non-empty string is thinking,
    as ``decoded_parts`` has it (``"reasoning":"","reasoning_content":"x"`` too). (A key
    of another name that starts with ``reasoning``, such as usage's
    ``reasoning_tokens``, is passed over.)"""
    thinking = False
    at = payload.find(_REASONING)
    while at >= 0:
        at += 10
        if payload.startswith(_AFTER_REASONING, at):
            at += 3
        elif payload.startswith(_AFTER_REASONING_CONTENT, at):
            at += 11
        else:
            at = payload.find(_REASONING, at)
            continue
        if at < len(payload) and payload[at] != _QUOTE:
            thinking = True
            break
        at = payload.find(_REASONING, at)  # an empty one: the other spelling may hold it
    at = payload.find(_CONTENT)
    return thinking, at >= 0 and at + 11 < len(payload) and payload[at + 11] != _QUOTE


def decoded_parts(body: dict[str, Any] | None) -> tuple[bool, bool]:
    """``delta_parts`` of a chunk that was decoded (JSON with spaces, or reordered)."""
    delta = _first_delta(body)
    thinking = _nonempty_str(delta.get("reasoning")) or _nonempty_str(delta.get("reasoning_content"))
    return thinking, _nonempty_str(delta.get("content"))


def _first_delta(body: dict[str, Any] | None) -> dict[str, Any]:
    choices = body.get("choices") if body else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    delta = first.get("delta")
    return delta if isinstance(delta, dict) else {}


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


class ReasoningWatch:
    """One chat stream's thinking chunks until its first answer chunk."""

    __slots__ = ("answer_at", "thinking_chunks")

    def __init__(self) -> None:
        self.answer_at: float | None = None
        self.thinking_chunks = 0

    def see(self, payload: bytes, now: float, body: dict[str, Any] | None = None) -> bool:
        """One token chunk (its event data, or a whole ``data: …`` event); ``body`` when it
        was decoded already. False once the answer started: nothing more to watch."""
        thinking, answer = delta_parts(payload) if body is None else decoded_parts(body)
        if thinking:
            self.thinking_chunks += 1
        if answer:
            self.answer_at = now
            return False
        return True

    def see_read(self, read: bytes, events: int, now: float) -> bool:
        """A read of ``events`` whole one-line token events (``sse.token_events_only``)."""
        if events != 1:
            for event in read[:-2].split(b"\n\n"):
                if not self.see(event, now):
                    return False
            return True
        # The usual read, one event: ``delta_parts`` inlined (a call and a tuple less on
        # every thinking chunk); tests/loadgen/transport/test_reasoning.py holds them equal.
        at = read.find(_REASONING)
        while at >= 0:
            at += 10
            if read.startswith(_AFTER_REASONING, at):
                at += 3
            elif read.startswith(_AFTER_REASONING_CONTENT, at):
                at += 11
            else:
                at = read.find(_REASONING, at)
                continue
            if at < len(read) and read[at] != _QUOTE:
                self.thinking_chunks += 1
                break
            at = read.find(_REASONING, at)  # an empty one: the other spelling may hold it
        at = read.find(_CONTENT)
        if at >= 0 and at + 11 < len(read) and read[at + 11] != _QUOTE:
            self.answer_at = now
            return False
        return True


def thinking_of_chunk(body: dict[str, Any] | None) -> str:
    """A decoded chunk's thinking text: ``reasoning``, else ``reasoning_content`` (empty
    when neither). A chunk with both holds the same text twice (servers that keep the old
    spelling for older clients, e.g. mlx-vlm's): it is counted once."""
    delta = _first_delta(body)
    for key in ("reasoning", "reasoning_content"):
        if _nonempty_str(delta.get(key)):
            return delta[key]
    return ""


def usage_reasoning_tokens(
    usage: dict[str, Any] | None, completion_tokens: int, thinking_chunks: int = 0
) -> int | None:
    """``usage.completion_tokens_details.reasoning_tokens`` when it is a usable count: None
    when absent, not a whole number, larger than ``completion_tokens``, or smaller than
    ``thinking_chunks`` (each chunk with thinking text holds at least one thinking token)."""
    details = usage.get("completion_tokens_details") if usage else None
    if not isinstance(details, dict):
        return None
    value = details.get("reasoning_tokens")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not thinking_chunks <= value <= completion_tokens:
        return None
    return value


def settle(
    rec: RequestRecord,
    watch: ReasoningWatch,
    usage: dict[str, Any] | None,
    count_thinking: Callable[[], int] | None,
) -> int:
    """Fill the record's reasoning fields once its token counts are known (see the module
    docstring); ``count_thinking`` counts the stream's thinking text with the run's
    tokenizer (None without one, or without the stream's text). Returns the thinking
    tokens the client counted (0 when usage gave the figure), which a completion count
    made without usage adds to the answer's."""
    capped = rec.tokens_from_usage and usage is not None
    from_usage = usage_reasoning_tokens(usage, rec.completion_tokens, watch.thinking_chunks) if capped else None
    if not watch.thinking_chunks:
        if from_usage:  # thinking hidden from the stream, counted by the server
            rec.reasoning_tokens, rec.reasoning_from_usage = from_usage, True
            rec.first_answer_at = watch.answer_at
        return 0
    rec.first_answer_at = watch.answer_at
    if from_usage is not None:
        rec.reasoning_tokens, rec.reasoning_from_usage = from_usage, True
        return 0
    counted = count_thinking() if count_thinking is not None else watch.thinking_chunks
    rec.reasoning_tokens = min(counted, rec.completion_tokens) if capped else counted
    rec.reasoning_from_usage = False
    return counted
