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
    eos_token_id = 1

    def encode(self, text: str) -> list[int]:
        _, index = _vocab()
        return [index.get(w, _bucket(w)) for w in _WORD_RE.findall(text)]

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
