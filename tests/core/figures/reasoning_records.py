"""Reasoning requests built by hand, and a sink that turns a synthetic run's requests into
a reasoning model's (for the tests of figures, recordings and screens)."""

from __future__ import annotations

from array import array
from dataclasses import replace

import numpy as np

from rampwatch.core.timeline import RequestRecord


def reasoning_record(
    id: int = 0,
    sent_at: float = 0.5,
    first_token_at: float | None = 1.0,
    chunk_times: tuple[float, ...] = (1.1, 1.2, 1.5, 1.6, 1.7),
    first_answer_at: float | None = 1.5,
    reasoning_tokens: int | None = 3,
    completion_tokens: int = 6,
    from_usage: bool | None = True,
    error_class: str | None = None,
    request_class: str | None = None,
) -> RequestRecord:
    """By default: thinking at 1.0, 1.1, 1.2 (3 tokens), the answer from 1.5 (3 tokens)."""
    return RequestRecord(
        id=id,
        scheduled_at=sent_at,
        sent_at=sent_at,
        end_at=(chunk_times[-1] if chunk_times else first_token_at or sent_at) + 0.01,
        first_token_at=first_token_at,
        chunk_times=list(chunk_times),
        prompt_tokens=10,
        completion_tokens=completion_tokens,
        first_answer_at=first_answer_at,
        reasoning_tokens=reasoning_tokens,
        reasoning_from_usage=None if reasoning_tokens is None else from_usage,
        error_class=error_class,
        error=None if error_class is None else "failed",
        request_class=request_class,
    )


def as_reasoning(
    record: RequestRecord, share: float, rng: np.random.Generator, cut_short: float = 0.0
) -> RequestRecord:
    """``record`` as a reasoning model's: its first ``share`` of chunks thinking (one token
    a chunk), the answer from the next; ``cut_short`` of them never answer."""
    if not record.ok or record.first_token_at is None:
        return record
    chunks = list(record.chunk_times)
    tokens = max(record.completion_tokens, len(chunks) + 1)
    thinking = max(1, int(round(share * (len(chunks) + 1))))
    if rng.random() < cut_short or thinking > len(chunks):
        return replace(record, completion_tokens=tokens, reasoning_tokens=tokens, reasoning_from_usage=True)
    return replace(
        record,
        chunk_times=array("d", chunks),
        completion_tokens=tokens,
        first_answer_at=chunks[thinking - 1],
        reasoning_tokens=thinking,
        reasoning_from_usage=True,
    )


class Reasoning:
    """Passes a synthetic run on with each request as a reasoning model's (seeded)."""

    def __init__(self, *sinks, share: float = 0.6, cut_short: float = 0.05, seed: int = 3) -> None:
        self.sinks = sinks
        self.share = share
        self.cut_short = cut_short
        self.rng = np.random.default_rng(seed)

    def on_request(self, record):
        record = as_reasoning(record, self.share, self.rng, self.cut_short)
        for s in self.sinks:
            s.on_request(record)

    def __getattr__(self, name):
        def each(item):
            for s in self.sinks:
                getattr(s, name)(item)

        return each
