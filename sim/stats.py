"""Per-engine metric state: plain counters and fixed-bucket histograms (no I/O).

Latency bucket boundaries are vLLM's own (``core.vllm_buckets``), so quantiles computed
from the simulator's histograms have the same resolution as from vLLM's.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from rampwatch.core import vllm_buckets

TTFT_BUCKETS = vllm_buckets.TTFT_S
ITL_BUCKETS = vllm_buckets.ITL_S
REQUEST_LATENCY_BUCKETS = vllm_buckets.REQUEST_LATENCY_S
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


def buckets_1_2_5(maximum: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``maximum`` (vLLM's token-count histograms)."""
    out: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > maximum:
                return tuple(out)
            out.append(value)
        exponent += 1


class Hist:
    """Cumulative-on-export histogram: ``counts[i]`` holds observations in bucket i only."""

    __slots__ = ("bounds", "counts", "total", "n")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # last slot: above every bound (+Inf)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs in that bound's bucket (le semantics).
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def cumulative(self) -> list[tuple[str, int]]:
        out, running = [], 0
        for bound, count in zip(self.bounds, self.counts):
            running += count
            out.append((repr(bound), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


@dataclass(slots=True)
class EngineStats:
    """Everything one engine exports on /metrics. Counters only grow."""

    max_model_len: int
    created: float = 0.0  # unix time the counters started (exported as `_created`)
    prompt_tokens: int = 0  # every prompt token, cached ones included (counted at first token)
    prompt_tokens_cached: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0  # tokens, counted when a request is first scheduled
    prefix_hits: int = 0  # tokens
    preemptions: int = 0
    mm_cache_queries: int = 0  # images looked up in the processor cache (sim.multimodal)
    mm_cache_hits: int = 0
    finished: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISH_REASONS, 0))
    ttft: Hist = field(default_factory=lambda: Hist(TTFT_BUCKETS))
    itl: Hist = field(default_factory=lambda: Hist(ITL_BUCKETS))
    tpot: Hist = field(default_factory=lambda: Hist(ITL_BUCKETS))
    e2e: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    queue: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    inference: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    prefill: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    decode: Hist = field(default_factory=lambda: Hist(REQUEST_LATENCY_BUCKETS))
    iteration_tokens: Hist = field(default_factory=lambda: Hist(ITERATION_TOKENS_BUCKETS))
    num_preemptions: Hist = field(default_factory=lambda: Hist(PREEMPTION_BUCKETS))
    params_n: Hist = field(default_factory=lambda: Hist(PARAMS_N_BUCKETS))
    # Token-count histograms: their buckets depend on max_model_len (__post_init__).
    request_prompt_tokens: Hist = field(init=False)
    request_generation_tokens: Hist = field(init=False)
    request_max_generation_tokens: Hist = field(init=False)
    request_params_max_tokens: Hist = field(init=False)
    request_prefill_kv_computed: Hist = field(init=False)

    def __post_init__(self) -> None:
        token_buckets = buckets_1_2_5(self.max_model_len)
        self.request_prompt_tokens = Hist(token_buckets)
        self.request_generation_tokens = Hist(token_buckets)
        self.request_max_generation_tokens = Hist(token_buckets)
        self.request_params_max_tokens = Hist(token_buckets)
        self.request_prefill_kv_computed = Hist(token_buckets)
