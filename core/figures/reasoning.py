"""A reasoning model's figures: its thinking and its answer told apart.

A reasoning request streams its thinking first (``delta.reasoning``) and then its
answer (``delta.content``); ``RequestRecord.first_answer_at`` is when the first answer
chunk came, and ``reasoning_tokens`` how many of ``completion_tokens`` were thinking.
Per request (``request_phases``):

- TTFT stays vLLM's (the first chunk of any kind); TTFA, the time to the first *answer*
  token, is ``first_answer_at - sent_at`` (``RequestRecord.ttfa``: the TTFT for a request
  that did not reason, none for one cut short while thinking);
- the ITLs of each phase, with vLLM's ITL definition (``stats``: the gaps between
  successive chunks): a chunk before ``first_answer_at`` is thinking, one from it on
  the answer. The reasoning phase's ITLs are the gaps from the first chunk to the last
  thinking chunk, the answer phase's those from the first answer chunk on; the one gap
  between the last thinking chunk and the first answer chunk is in neither (it ends
  the TTFA, as TTFT ends before the first ITL);
- reasoning and answer token counts, and where the reasoning count came from: the
  server's usage, the tokenizer, or (over a set of requests) both.

Over a set of requests (``ReasoningTotals``, fed ``ReasoningBlock``s as the summary
builder is fed its blocks): TTFA's statistics as the summary gives TTFT's, the phases'
ITLs, the reasoning share of output tokens and the requests cut short while thinking
(they reasoned and no answer came). A run where no request reasoned has no figures
(None): nothing of this shows in its outputs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rampwatch.core.figures import stats
from rampwatch.core.figures.run_summary import LatencyMs
from rampwatch.core.timeline import RequestRecord

# Where a run's reasoning token counts came from.
SOURCE_USAGE = "usage"  # completion_tokens_details.reasoning_tokens
SOURCE_TOKENIZER = "tokenizer"
SOURCE_MIXED = "mixed"  # some requests' from usage, others' counted

# A recording keeps chunk times to 10 µs and first_answer_at to 1 µs: a chunk within one
# chunk quantum before the first answer time is that answer chunk, rounded.
PHASE_TOLERANCE_S = 10e-6


def reasoned(record: RequestRecord) -> bool:
    """Whether the request streamed any thinking (the client set either field)."""
    return record.first_answer_at is not None or record.reasoning_tokens is not None


def phase_itls(
    first_token_at: np.ndarray,
    first_answer_at: np.ndarray,
    thinking_only: np.ndarray,
    chunk_times: np.ndarray,
    counts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(reasoning ITLs, answer ITLs) of several requests, request after request, in one
    numpy pass. Request i has its first chunk at ``first_token_at[i]`` (not NaN), its
    later chunks in ``chunk_times`` (``counts[i]`` of them, concatenated), its first
    answer at ``first_answer_at[i]`` (NaN: none); ``thinking_only[i]``: it reasoned and
    no answer came, so every gap is thinking (a request without either is all answer)."""
    counts = np.asarray(counts, dtype=np.int64)
    if not counts.any():
        empty = np.empty(0, dtype=np.float64)
        return empty, empty
    arrivals = np.asarray(chunk_times, dtype=np.float64)
    previous = np.empty_like(arrivals)
    previous[1:] = arrivals[:-1]
    starts = np.cumsum(counts) - counts
    with_chunks = counts > 0
    previous[starts[with_chunks]] = first_token_at[with_chunks]
    gaps = stats.clean_itls(arrivals - previous)
    owner = np.repeat(np.arange(counts.size), counts)
    answer_at = np.asarray(first_answer_at, dtype=np.float64)[owner] - PHASE_TOLERANCE_S
    no_answer = np.isnan(answer_at)
    all_thinking = np.asarray(thinking_only, dtype=bool)[owner]
    with np.errstate(invalid="ignore"):
        thinking = np.where(no_answer, all_thinking, arrivals < answer_at)
        answering = np.where(no_answer, ~all_thinking, previous >= answer_at)
    return gaps[thinking], gaps[answering]


@dataclass(frozen=True)
class RequestPhases:
    """One request's two phases (times in seconds)."""

    ttft: float | None
    ttfa: float | None  # None: cut short while thinking, or no token at all
    reasoning_itls: np.ndarray
    answer_itls: np.ndarray
    reasoning_tokens: int
    answer_tokens: int
    source: str | None  # SOURCE_USAGE or SOURCE_TOKENIZER; None when it did not reason


def request_phases(record: RequestRecord) -> RequestPhases:
    """``record``'s phases (see the module docstring)."""
    empty = np.empty(0, dtype=np.float64)
    thinking, answer = empty, empty
    if record.first_token_at is not None:
        thinking, answer = phase_itls(
            np.array([record.first_token_at]),
            np.array([math.nan if record.first_answer_at is None else record.first_answer_at]),
            np.array([record.first_answer_at is None and bool(record.reasoning_tokens)]),
            np.asarray(record.chunk_times, dtype=np.float64),
            np.array([len(record.chunk_times)]),
        )
    source = None
    if record.reasoning_tokens is not None:
        source = SOURCE_USAGE if record.reasoning_from_usage else SOURCE_TOKENIZER
    return RequestPhases(
        ttft=record.ttft,
        ttfa=record.ttfa,
        reasoning_itls=thinking,
        answer_itls=answer,
        reasoning_tokens=record.reasoning_tokens or 0,
        answer_tokens=record.answer_tokens,
        source=source,
    )


@dataclass(frozen=True)
class ReasoningBlock:
    """The reasoning side of a block of finished requests (``summary_builder.RequestBlock``):
    ``ttfa_s`` has one entry per request of the block (NaN: failed, no token, or cut
    short while thinking); the rest are of its successful requests."""

    ttfa_s: np.ndarray
    reasoning_itls: np.ndarray
    answer_itls: np.ndarray
    reasoning_tokens: int
    completion_tokens: int  # vLLM's output tokens (a 0 counted as 1), of those requests
    reasoned: int  # requests that streamed thinking
    no_answer: int  # of those, the ones no answer came for
    from_usage: int  # requests whose reasoning count is the server's
    from_tokenizer: int  # … counted with the tokenizer

    @classmethod
    def of_columns(
        cls,
        ok: np.ndarray,
        sent_at: np.ndarray,
        first_token_at: np.ndarray,
        completion_tokens: np.ndarray,
        first_answer_at: Sequence[float | None],
        reasoning_tokens: Sequence[int | None],
        reasoning_from_usage: Sequence[bool | None],
        chunk_times: np.ndarray,
        counts: np.ndarray,
    ) -> ReasoningBlock | None:
        """The block of requests given as columns (one entry per request; ``first_token_at``
        NaN where none came; ``chunk_times`` every request's later chunks, ``counts`` of
        each); None when none of them reasoned."""
        answer_at = np.array([math.nan if v is None else v for v in first_answer_at], dtype=np.float64)
        has_count = np.array([v is not None for v in reasoning_tokens], dtype=bool)
        if not ok.size or not (has_count.any() or (~np.isnan(answer_at)).any()):
            return None
        thinking = np.array([v or 0 for v in reasoning_tokens], dtype=np.int64)
        usage = np.array([bool(v) for v in reasoning_from_usage], dtype=bool)
        did_reason = has_count | ~np.isnan(answer_at)
        thinking_only = np.isnan(answer_at) & (thinking > 0)
        has_first = ~np.isnan(first_token_at)
        ttft = np.where(has_first, first_token_at - sent_at, 0.0)  # vLLM's `ttft or 0`
        ttfa = np.where(np.isnan(answer_at), ttft, answer_at - sent_at)
        ttfa = np.where(ok & ~thinking_only & (has_first | np.isnan(answer_at)), ttfa, math.nan)
        use = ok & has_first
        chunk_use = np.repeat(use, counts)
        reasoning_itls, answer_itls = phase_itls(
            first_token_at[use], answer_at[use], thinking_only[use], chunk_times[chunk_use], counts[use]
        )
        return cls(
            ttfa_s=ttfa,
            reasoning_itls=reasoning_itls,
            answer_itls=answer_itls,
            reasoning_tokens=int(thinking[ok].sum()),
            completion_tokens=int(stats.output_lens(completion_tokens[ok]).sum()),
            reasoned=int((did_reason & ok).sum()),
            no_answer=int((thinking_only & ok).sum()),
            from_usage=int((has_count & usage & ok).sum()),
            from_tokenizer=int((has_count & ~usage & ok).sum()),
        )

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord]) -> ReasoningBlock | None:
        """``of_columns`` of records held in memory; None when none reasoned (no work
        for a plain run's records)."""
        if not any(reasoned(r) for r in records):
            return None
        return cls.of_columns(
            ok=np.array([r.ok for r in records], dtype=bool),
            sent_at=np.array([r.sent_at for r in records], dtype=np.float64),
            first_token_at=np.array(
                [math.nan if r.first_token_at is None else r.first_token_at for r in records], dtype=np.float64
            ),
            completion_tokens=np.array([r.completion_tokens for r in records], dtype=np.int64),
            first_answer_at=[r.first_answer_at for r in records],
            reasoning_tokens=[r.reasoning_tokens for r in records],
            reasoning_from_usage=[r.reasoning_from_usage for r in records],
            # each record's chunk times as one array (array('d') once packed): no loop per chunk
            chunk_times=np.concatenate([np.asarray(r.chunk_times, dtype=np.float64) for r in records]),
            counts=np.array([len(r.chunk_times) for r in records], dtype=np.int64),
        )


def tokens_source(from_usage: int, from_tokenizer: int) -> str | None:
    """``usage``, ``tokenizer`` or ``mixed``; None when no request had a count."""
    if from_usage and from_tokenizer:
        return SOURCE_MIXED
    if from_usage:
        return SOURCE_USAGE
    return SOURCE_TOKENIZER if from_tokenizer else None


@dataclass(frozen=True)
class ReasoningFigures:
    """A set of requests' reasoning figures (times in ms, as ``LatencyMs``)."""

    ttfa: LatencyMs
    reasoning_itl: LatencyMs
    answer_itl: LatencyMs
    reasoning_tokens: int
    output_tokens: int  # vLLM's total output tokens of the same requests
    reasoning_requests: int
    no_answer_requests: int  # reasoned and were cut short before any answer
    tokens_source: str | None

    @property
    def answer_tokens(self) -> int:
        return max(0, self.output_tokens - self.reasoning_tokens)

    @property
    def reasoning_share(self) -> float | None:
        """The share of output tokens that were thinking (0..1); None without output."""
        return self.reasoning_tokens / self.output_tokens if self.output_tokens else None

    def to_dict(self) -> dict[str, Any]:
        """Flat keys: ``mean_ttfa_ms``… (vLLM's spelling of TTFT's), the phases' ITLs
        as ``mean_reasoning_itl_ms``…, then the counts. The result JSON prefixes each
        with ``rampwatch_``."""
        out: dict[str, Any] = {}
        for name, latency in (
            ("ttfa", self.ttfa),
            ("reasoning_itl", self.reasoning_itl),
            ("answer_itl", self.answer_itl),
        ):
            for stat, value in latency.items():
                out[f"{stat}_{name}_ms"] = value
        out["reasoning_tokens"] = self.reasoning_tokens
        out["answer_tokens"] = self.answer_tokens
        out["reasoning_share"] = self.reasoning_share
        out["reasoning_requests"] = self.reasoning_requests
        out["no_answer_requests"] = self.no_answer_requests
        out["reasoning_tokens_source"] = self.tokens_source
        return out


class ReasoningTotals:
    """``ReasoningBlock``s added up. ``values`` keeps TTFAs and ITLs (``stats.ExactValues``,
    or ``stats.RunningValues`` for the live figures), ``itl_values`` the ITLs if not the
    same (a recording's: ``stats.MicrosecondCounts``)."""

    def __init__(self, values: type = stats.ExactValues, itl_values: type | None = None) -> None:
        self.ttfa = values()
        self.reasoning_itl = (itl_values or values)()
        self.answer_itl = (itl_values or values)()
        self.reasoning_tokens = 0
        self.output_tokens = 0
        self.reasoned = 0
        self.no_answer = 0
        self.from_usage = 0
        self.from_tokenizer = 0

    @classmethod
    def seeded(cls, ttft: Any, itl: Any, output_tokens: int) -> ReasoningTotals:
        """Totals that start from the requests a summary took in before the first that
        reasoned: none of them reasoned, so their TTFTs (``ttft``, the summary's store)
        are their TTFAs, their ITLs (``itl``) the answer's, their tokens answer."""
        totals = cls.__new__(cls)
        totals.ttfa = copy.deepcopy(ttft)
        totals.reasoning_itl = type(itl)()
        totals.answer_itl = copy.deepcopy(itl)
        totals.reasoning_tokens = 0
        totals.output_tokens = output_tokens
        totals.reasoned = totals.no_answer = totals.from_usage = totals.from_tokenizer = 0
        return totals

    def add(self, block: ReasoningBlock) -> None:
        self.ttfa.add(block.ttfa_s[~np.isnan(block.ttfa_s)])
        self.reasoning_itl.add(block.reasoning_itls)
        self.answer_itl.add(block.answer_itls)
        self.reasoning_tokens += block.reasoning_tokens
        self.output_tokens += block.completion_tokens
        self.reasoned += block.reasoned
        self.no_answer += block.no_answer
        self.from_usage += block.from_usage
        self.from_tokenizer += block.from_tokenizer

    def add_plain(self, completion_tokens: int, ttft_s: np.ndarray, itls: np.ndarray) -> None:
        """Successful requests of a block where none reasoned (after the run's first that
        did): their TTFT is their TTFA, their ITLs the answer's, their tokens answer."""
        self.ttfa.add(ttft_s)
        self.answer_itl.add(itls)
        self.output_tokens += completion_tokens

    def figures(self, percentiles: Sequence[float] = stats.PERCENTILES) -> ReasoningFigures:
        return ReasoningFigures(
            ttfa=LatencyMs.from_describe(self.ttfa.describe_ms(percentiles)),
            reasoning_itl=LatencyMs.from_describe(self.reasoning_itl.describe_ms(percentiles)),
            answer_itl=LatencyMs.from_describe(self.answer_itl.describe_ms(percentiles)),
            reasoning_tokens=self.reasoning_tokens,
            output_tokens=self.output_tokens,
            reasoning_requests=self.reasoned,
            no_answer_requests=self.no_answer,
            tokens_source=tokens_source(self.from_usage, self.from_tokenizer),
        )

    # -- live checkpoints (the bounded summary's: RunningValues stores) ------------------
    def _stores(self) -> dict[str, Any]:
        return {"ttfa": self.ttfa, "reasoning_itl": self.reasoning_itl, "answer_itl": self.answer_itl}

    def export_state(self, arrays: dict[str, np.ndarray], prefix: str) -> dict[str, Any]:
        """The totals as JSON-able values, their histograms put in ``arrays``
        (``<prefix>.reasoning.<name>``); only a live builder's (``stats.RunningValues``)."""
        sums = {}
        for name, store in self._stores().items():
            assert isinstance(store, stats.RunningValues), "only the live (bounded) figures are checkpointed"
            arrays[f"{prefix}.reasoning.{name}"] = store.hist.counts
            sums[name] = [store.n, store.total, store.squares, store.hist.total]
        counts = [self.reasoning_tokens, self.output_tokens, self.reasoned, self.no_answer]
        return {"sums": sums, "counts": [*counts, self.from_usage, self.from_tokenizer]}

    @classmethod
    def restore_state(cls, state: dict[str, Any], arrays: dict[str, np.ndarray], prefix: str) -> ReasoningTotals:
        totals = cls(stats.RunningValues)
        for name, store in totals._stores().items():
            store.n, store.total, store.squares, store.hist.total = state["sums"][name]
            store.hist._counts = np.array(arrays[f"{prefix}.reasoning.{name}"], dtype=np.int64)
        (
            totals.reasoning_tokens,
            totals.output_tokens,
            totals.reasoned,
            totals.no_answer,
            totals.from_usage,
            totals.from_tokenizer,
        ) = state["counts"]
        return totals
