"""The simulator's built-in tokenizer: deterministic, dependency-free, exact round trip.

A token is one whitespace-separated word. Words in the fixed vocabulary map to their
index; any other word maps to a stable hash bucket. ``decode`` joins vocabulary words
with single spaces, so ``encode(decode(ids)) == ids`` for every id in range: the load
generator can build prompts of an exact token length for the simulator.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

VOCAB_SIZE = 32000
_SYLLABLES = (
    "ka ri to mu se na lo vi de pa zu he ko ma ti ro bu ne sa fi go lu ye wa ji "
    "po ku da me xi te ba no ru si mo ga vo le hu di za pe ki"
).split()
_WORD_RE = re.compile(r"\S+")


@lru_cache(maxsize=1)
def _vocab() -> tuple[list[str], dict[str, int]]:
    words: list[str] = []
    n = len(_SYLLABLES)
    i = 0
    while len(words) < VOCAB_SIZE:
        # Base-n digits as syllables give distinct, pronounceable, space-free words.
        digits, x = [], i
        while True:
            digits.append(_SYLLABLES[x % n])
            x //= n
            if x == 0:
                break
        words.append("".join(digits))
        i += 1
    return words, {w: k for k, w in enumerate(words)}


def _bucket(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "big") % VOCAB_SIZE


class SimTokenizer:
    """Word-level tokenizer shared by the simulator and the load generator."""

    vocab_size = VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        _, index = _vocab()
        # the hash only for words outside the vocabulary (get's default would hash every word)
        return [index[w] if w in index else _bucket(w) for w in _WORD_RE.findall(text)]

    def decode(self, ids: list[int]) -> str:
        words, _ = _vocab()
        return " ".join(words[i % VOCAB_SIZE] for i in ids)

    def token_text(self, token_id: int, first: bool) -> str:
        """Text of one generated token as streamed (a leading space except at the start)."""
        words, _ = _vocab()
        w = words[token_id % VOCAB_SIZE]
        return w if first else " " + w

    def count(self, text: str) -> int:
        return len(_WORD_RE.findall(text))


# Chat template. Every message is framed as  <start> <role> content... <end>  and the
# prompt ends with the generation prompt  <start> <assistant>, so
#     prompt_tokens = sum(count(content) + 3 for each message) + 2.
# Framing tokens use fixed ids; like any id they also decode to ordinary words.
CHAT_START_ID = 2
CHAT_END_ID = 3
CHAT_ROLE_IDS = {"system": 4, "user": 5, "assistant": 6, "tool": 7, "developer": 8}
CHAT_TOKENS_PER_MESSAGE = 3
CHAT_GENERATION_PROMPT_TOKENS = 2


def message_text(content: object) -> str:
    """A message's text: a string, or the ``text`` parts of an OpenAI content list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    raise ValueError("message content must be a string or a list of content parts")


def apply_chat_template(tokenizer: SimTokenizer, messages: list[dict]) -> list[int]:
    """Token ids of a chat prompt under the simulator's fixed template (see above)."""
    ids: list[int] = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError("each message must be an object with a 'role'")
        role = str(message["role"])
        ids.append(CHAT_START_ID)
        ids.append(CHAT_ROLE_IDS.get(role, _bucket(role)))
        ids.extend(tokenizer.encode(message_text(message.get("content"))))
        ids.append(CHAT_END_ID)
    ids.append(CHAT_START_ID)
    ids.append(CHAT_ROLE_IDS["assistant"])
    return ids


def count_chat_tokens(tokenizer: SimTokenizer, messages: list[dict]) -> int:
    """``len(apply_chat_template(...))`` without building the list."""
    return (
        sum(tokenizer.count(message_text(m.get("content"))) + CHAT_TOKENS_PER_MESSAGE for m in messages)
        + CHAT_GENERATION_PROMPT_TOKENS
    )
