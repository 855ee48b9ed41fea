"""Prompt text of an exact token length.

Random token ids are decoded to text; for sub-word tokenizers the text re-encodes to a
slightly different count (tokens merge or split at boundaries), so a short fix-up loop
re-encodes, trims or tops up, and decodes again until the count is exact. When parts are
joined (shared prefix + unique tail), only the tail is adjusted, so the shared prefix
stays byte-identical across requests.
"""

from __future__ import annotations

import numpy as np

from rampwatch.loadgen.workload.tokenizers import SimTokenizerAdapter, TokenizerLike, count_tokens

SEPARATOR = "\n\n"
_FIXUP_ROUNDS = 12
_MAX_PROBED_IDS = 20000


def _clean_ids_uncached(tokenizer: TokenizerLike) -> np.ndarray:
    vocab_size = int(getattr(tokenizer, "vocab_size", 0) or 0)
    special: frozenset[int] = getattr(tokenizer, "special_ids", frozenset())
    if vocab_size <= 0:
        raise ValueError("tokenizer has no vocab_size: cannot draw random token ids")
    if isinstance(tokenizer, SimTokenizerAdapter):
        return np.arange(vocab_size)  # every word of its vocabulary round-trips
    candidates = np.arange(vocab_size)
    if vocab_size > _MAX_PROBED_IDS:
        candidates = np.sort(np.random.default_rng(0).choice(vocab_size, _MAX_PROBED_IDS, replace=False))
    clean = []
    for i in candidates.tolist():
        if i in special:
            continue
        piece = tokenizer.decode([i])
        # Pieces that decode to partial UTF-8 or control characters never round-trip.
        if piece == " " or (piece.strip() and "\ufffd" not in piece and piece.isprintable()):
            clean.append(i)
    if not clean:
        raise ValueError("tokenizer has no printable tokens to build prompts from")
    return np.array(clean)


_clean_cache: dict[int, tuple[TokenizerLike, np.ndarray]] = {}


def clean_token_ids(tokenizer: TokenizerLike) -> np.ndarray:
    """Token ids that decode to printable text on their own (cached per tokenizer)."""
    hit = _clean_cache.get(id(tokenizer))
    if hit is None or hit[0] is not tokenizer:
        hit = (tokenizer, _clean_ids_uncached(tokenizer))
        _clean_cache[id(tokenizer)] = hit
    return hit[1]


def random_token_ids(tokenizer: TokenizerLike, n: int, rng: np.random.Generator) -> list[int]:
    if n <= 0:
        return []
    pool = clean_token_ids(tokenizer)
    return pool[rng.integers(0, len(pool), n)].tolist()


def synth_text(tokenizer: TokenizerLike, n_tokens: int, rng: np.random.Generator) -> str:
    """Text that encodes to exactly ``n_tokens`` tokens (best effort within a few rounds
    for exotic tokenizers; callers count the result)."""
    return synth_counted(tokenizer, n_tokens, rng)[0]


def synth_counted(tokenizer: TokenizerLike, n_tokens: int, rng: np.random.Generator) -> tuple[str, int]:
    """``synth_text`` and the text's token count (known without a further encode when
    the fix-up loop hit the target)."""
    if n_tokens <= 0:
        return "", 0
    ids = random_token_ids(tokenizer, n_tokens, rng)
    text = tokenizer.decode(ids).strip()
    for _ in range(_FIXUP_ROUNDS):
        encoded = tokenizer.encode(text)
        if len(encoded) == n_tokens:
            return text, n_tokens
        if len(encoded) > n_tokens:
            ids = encoded[:n_tokens]
        else:
            ids = encoded + random_token_ids(tokenizer, n_tokens - len(encoded), rng)
        text = tokenizer.decode(ids).strip()
    return text, count_tokens(tokenizer, text)


def join(parts: list[str]) -> str:
    return SEPARATOR.join(p for p in parts if p)


def compose_exact(
    tokenizer: TokenizerLike, prefix: str, total_tokens: int, rng: np.random.Generator
) -> tuple[str, int]:
    """``prefix`` + separator + a synthetic tail, counting ``total_tokens`` in all when
    the prefix leaves room. Returns (text, its actual token count)."""
    if not prefix:
        return synth_counted(tokenizer, total_tokens, rng)
    base = count_tokens(tokenizer, prefix + SEPARATOR)
    want_tail = total_tokens - base
    if want_tail <= 0:
        return prefix, count_tokens(tokenizer, prefix)
    tail_len = want_tail
    best: tuple[int, str, int] | None = None
    for _ in range(_FIXUP_ROUNDS):
        text = join([prefix, synth_text(tokenizer, tail_len, rng)])
        got = count_tokens(tokenizer, text)
        if got == total_tokens:
            return text, got
        if best is None or abs(got - total_tokens) < best[0]:
            best = (abs(got - total_tokens), text, got)
        tail_len = max(1, tail_len + (total_tokens - got))
    assert best is not None
    return best[1], best[2]
