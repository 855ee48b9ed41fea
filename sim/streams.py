"""What the front end writes: one request's output stream from the engine's driver to its
HTTP handler, the streamed chunks' pre-built byte templates and the answer's words.

Streamed chunks are byte templates (no per-token ``json.dumps``) and every handler writes
whatever accumulated since its last write in one call.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from itertools import repeat

from rampwatch.core.tokenizer import VOCAB_SIZE
from rampwatch.sim.api_requests import TOKENIZER
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import FINISHED, SimRequest

WORDS_FIRST: list[bytes] = []
WORDS_REST: list[bytes] = []


def word_tables() -> tuple[list[bytes], list[bytes]]:
    if not WORDS_FIRST:
        for i in range(VOCAB_SIZE):
            # Vocabulary words are plain ASCII letters: safe inside a JSON string as is.
            WORDS_FIRST.append(TOKENIZER.token_text(i, True).encode())
            WORDS_REST.append(TOKENIZER.token_text(i, False).encode())
    return WORDS_FIRST, WORDS_REST


def generated_text(token_ids: list[int], continuation: bool = False) -> str:
    """The text of generated tokens. A completion continues its prompt's text, so its
    first word carries its leading space too (as a real tokenizer's first generated token,
    decoded after the prompt, usually does): prompt + answer re-encodes to the prompt's
    ids followed by the generated ids, and a conversation's next turn hits the answer's
    cached blocks. A chat answer is its own message and starts without one."""
    return "".join(TOKENIZER.token_text(t, i == 0 and not continuation) for i, t in enumerate(token_ids))


def cache_created_tokens(req: SimRequest, config: SimConfig) -> int:
    """vLLM's ``created_cache_tokens``: prompt tokens this request computed and cached,
    the prompt's full blocks less those it found cached (none without prefix caching)."""
    if not config.enable_prefix_caching:
        return 0
    bs = config.block_size
    return max(0, req.num_prompt_tokens // bs * bs - req.num_cached_tokens)


class OutputStream:
    """One request's output path from the driver to its HTTP handler."""

    __slots__ = (
        "req",
        "chat",
        "stream",
        "head",
        "first_words",
        "tail",
        "final_tails",
        "pending",
        "waiter",
        "role_prefix",
        "continuous_usage",
        "prompt_tokens",
        "abort_after",
        "sent",
        "pushed",
        "done",
        "thinking",
        "thinking_head",
        "reasoning_usage",
    )

    def __init__(
        self,
        req: SimRequest,
        chat: bool,
        stream: bool,
        head: bytes,
        role_chunk: bytes | None,
        continuous_usage: bool,
        abort_after: int | None,
    ) -> None:
        self.req = req
        self.chat = chat
        self.stream = stream
        self.head = head
        # A completion's first word continues the prompt: it keeps its leading space.
        self.first_words = WORDS_FIRST if chat else WORDS_REST
        self.tail = CHAT_TAIL if chat else COMPLETION_TAIL
        self.final_tails = CHAT_FINAL_TAILS if chat else COMPLETION_FINAL_TAILS
        self.pending: list[bytes] = []
        self.waiter: asyncio.Future | None = None
        self.role_prefix = role_chunk
        self.continuous_usage = continuous_usage
        self.prompt_tokens = req.num_prompt_tokens
        self.abort_after = abort_after
        self.sent = 0
        self.pushed = 0  # output tokens handed over (a speculative step gives several)
        self.done = False  # the final token has been handed over
        # A reasoning model's first `thinking` tokens are thinking (sim.reasoning),
        # streamed after `thinking_head` (None: not streamed, include_reasoning false).
        self.thinking = 0
        self.thinking_head: bytes | None = None
        self.reasoning_usage = False  # continuous usage carries completion_tokens_details

    def push(self) -> None:
        """Called by the driver after a step that gave this request one token or more."""
        req = self.req
        if self.stream:
            out = req.output_token_ids
            n = len(out)
            first, self.pushed = self.pushed, n
            if req.status == FINISHED:
                self.done = True
                reason = req.finish_reason
                assert reason is not None  # the engine sets it as it finishes a request
                tail = self.final_tails[reason]
            else:
                tail = self.tail
            if self.continuous_usage:
                usage = usage_bytes(self.prompt_tokens, n)
                if self.reasoning_usage:  # as vLLM with a reasoning parser: the thinking so far
                    usage = usage[:-1] + b',"completion_tokens_details":{"reasoning_tokens":%d}}' % min(
                        n, self.thinking
                    )
                tail = tail[:-3] + usage + b"}\n\n"
            if self.role_prefix is not None:
                self.pending.append(self.role_prefix)
                self.role_prefix = None
            # The new tokens [first, n): thinking ones (sim.reasoning), then answer ones. A
            # step that gave several (accepted drafts) sends each kind as one chunk, as
            # vLLM's delta does; the last chunk carries the finish reason and usage.
            split = min(max(first, self.thinking), n)
            chunks: list[tuple[bytes, bytes]] = []
            if split > first and self.thinking_head is not None:
                chunks.append((self.thinking_head, self._words(out, first, split)))
            if n > split:
                chunks.append((self.head, self._words(out, split, n)))
            if not chunks:
                if self.done:  # hidden thinking cut short: the finish reason still comes
                    self.pending.append(self.head + tail)
            else:
                for head, text in chunks[:-1]:
                    self.pending.append(head + text + self.tail)
                head, text = chunks[-1]
                self.pending.append(head + text + tail)
        elif req.status == FINISHED:
            self.done = True
        self.wake()

    def _words(self, out: list[int], start: int, end: int) -> bytes:
        """The text of output tokens [start, end): the first thinking token and the first
        answer token as a first word (no leading space in chat), the others as the rest."""

        def word(i: int) -> bytes:
            if i < self.thinking:
                return (WORDS_FIRST if i == 0 else WORDS_REST)[out[i]]
            return (self.first_words if i == self.thinking else WORDS_REST)[out[i]]

        if end == start + 1:
            return word(start)
        return b"".join(word(i) for i in range(start, end))

    def wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def next_batch(self) -> list[bytes]:
        while not self.pending and not self.done:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
            self.waiter = None
        batch, self.pending = self.pending, []
        return batch


def usage_bytes(prompt: int, completion: int) -> bytes:
    return b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        prompt,
        prompt + completion,
        completion,
    )


COMPLETION_TAIL = (
    b'","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
)
COMPLETION_FINAL_TAILS = {
    reason: b'","logprobs":null,"finish_reason":"%s","stop_reason":null,"prompt_token_ids":null,"token_ids":null}]}\n\n'
    % reason.encode()
    for reason in ("stop", "length", "abort")
}
CHAT_TAIL = b'"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
CHAT_FINAL_TAILS = {
    reason: b'"},"logprobs":null,"finish_reason":"%s","stop_reason":null,"token_ids":null}]}\n\n' % reason.encode()
    for reason in ("stop", "length", "abort")
}
DONE_EVENT = b"data: [DONE]\n\n"


def note_write(gaps: array[float], last_write: float, token_chunks: int) -> float:
    """Add the gaps of a write of ``token_chunks`` token chunks that has just returned to
    a stream's ``gaps`` (``last_write``: the time of its previous one, 0.0 before its
    first); returns this write's time."""
    now = time.monotonic()
    if token_chunks:
        if last_write:
            gaps.append(now - last_write)
        if token_chunks > 1:
            gaps.extend(repeat(0.0, token_chunks - 1))
        return now
    return last_write
