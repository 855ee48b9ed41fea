"""Speculative decoding in the simulator: vLLM's ``--speculative-config``, what each decode
step drafts and accepts, what the drafts cost, and vLLM 0.32's ``vllm:spec_decode_*``
counters.

Each decode step, every running request in decode drafts ``k`` tokens (``k`` =
``num_speculative_tokens``, or the entry of ``num_speculative_tokens_per_batch_size`` for
the step's batch, as vLLM 0.32's dynamic speculative decoding looks it up; cut only by the
step's token budget and ``max_model_len``, as vLLM's scheduler cuts it: accepted tokens past
``max_tokens`` are dropped) and the target model verifies them with its own next
token: the step computes ``1 + k`` tokens for the request, and it emits ``1 + accepted``
of them. Draft position ``i`` is accepted, given positions ``0..i-1`` were, with the
method's conditional rate ``acceptance[i]`` (seeded, per engine); the first rejection ends
the draft. The rejected slots' KV is rolled back (``num_computed_tokens``), as vLLM's
scheduler does.

The cost (``draft_cost``): verification is in the target's step already (its ``1 + k``
tokens per request go through the roofline like any others). A draft model, an EAGLE head
or an MTP layer runs ``k`` sequential passes of one token per request before it: each a
roofline of ``draft_fraction`` of the target's weights read and multiplied (the draft's KV
reads are left out: one layer, or a small model's). N-gram matching runs on the host:
``ngram_host_s`` per request drafted. The figures are illustrative (docs/sim-presets.md).

Rates: a method's ``SPEC_PRESETS`` entry (illustrative, per position, see the docs), or
vLLM's own ``rejection_sample_method: "synthetic"`` with ``synthetic_acceptance_rates``
(unconditional: position ``i``'s entry is the chance that the first ``i + 1`` drafts are
all accepted) or ``synthetic_acceptance_length``, resolved as vLLM resolves them. The
simulator's own ``acceptance`` key (conditional rates, one per position) overrides both.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.errors import UserError

FLAG = "--speculative-config"


@dataclass(frozen=True, slots=True)
class SpecPreset:
    """One drafting method: its per-position conditional acceptance rates (the last one
    repeats for longer drafts) and what drafting costs."""

    acceptance: tuple[float, ...]
    draft_fraction: float = 0.0  # the drafter's weights as a share of the target's (0: no GPU pass)
    ngram_host_s: float = 0.0  # host time per request drafted (n-gram lookup)
    description: str = ""


# Illustrative rates: of the order vLLM's and the papers' chat benchmarks report (mean
# acceptance lengths of ~1.5–2 for n-gram on chat, ~2.5–3.5 for EAGLE/EAGLE-3 and MTP at
# k = 3–5), not measurements (docs/sim-presets.md).
SPEC_PRESETS: dict[str, SpecPreset] = {
    "ngram": SpecPreset((0.45, 0.35, 0.3, 0.25), ngram_host_s=10e-6, description="prompt lookup (n-gram)"),
    "suffix": SpecPreset((0.5, 0.4, 0.35, 0.3), ngram_host_s=15e-6, description="suffix decoding"),
    "eagle": SpecPreset((0.75, 0.65, 0.55, 0.5), draft_fraction=0.09, description="EAGLE head (one layer + LM head)"),
    "eagle3": SpecPreset((0.8, 0.7, 0.62, 0.55), draft_fraction=0.09, description="EAGLE-3 head"),
    "mtp": SpecPreset((0.85, 0.7, 0.6, 0.5), draft_fraction=0.09, description="multi-token-prediction layer"),
    "draft_model": SpecPreset((0.7, 0.6, 0.55, 0.5), draft_fraction=0.15, description="a small draft model"),
}
# vLLM's spellings that mean one of the presets' methods.
METHOD_ALIASES = {"[ngram]": "ngram", "ngram_gpu": "ngram", "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp"}

# SpeculativeConfig's fields in vLLM 0.32: the ones not read here are accepted and ignored
# (they change nothing the simulator models), any other key is refused as vLLM refuses it.
VLLM_KEYS = frozenset(
    {
        "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size",
        "tensor_parallel_size", "quantization", "moe_backend", "attention_backend", "kv_cache_dtype",
        "max_model_len", "revision", "code_revision", "index_share_for_mtp_iteration",
        "disable_padded_drafter_batch", "disable_eagle_block_drop", "use_local_argmax_reduction",
        "use_heterogeneous_vocab", "prompt_lookup_max", "prompt_lookup_min", "parallel_drafting",
        "num_speculative_tokens_per_batch_size", "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob", "rejection_sample_method", "synthetic_acceptance_rates",
        "synthetic_acceptance_length", "enable_adaptive_verification", "draft_sample_method",
        "dspark_draft_topk",
    }
)  # fmt: skip
SIM_KEYS = frozenset({"acceptance"})  # the simulator's own: conditional rates per position


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """A parsed ``--speculative-config``: ``acceptance`` holds one conditional rate per
    draft position (``num_speculative_tokens`` of them)."""

    method: str
    num_speculative_tokens: int
    acceptance: tuple[float, ...]
    draft_fraction: float = 0.0
    ngram_host_s: float = 0.0
    # (first batch size, last batch size, k), vLLM's inclusive ranges; None: always k.
    per_batch_size: tuple[tuple[int, int, int], ...] | None = None
    text: str = ""  # the flag's value as given (config_to_argv gives it back)

    @property
    def mean_acceptance_length(self) -> float:
        """1 + the expected accepted drafts at full length (vLLM's convention: the bonus
        token counts)."""
        total, p = 1.0, 1.0
        for rate in self.acceptance:
            p *= rate
            total += p
        return total

    def unconditional(self) -> tuple[float, ...]:
        """Position i's chance to be accepted (every position before it accepted too):
        what vLLM's per-position counter over its drafts counter converges to."""
        out, p = [], 1.0
        for rate in self.acceptance:
            p *= rate
            out.append(p)
        return tuple(out)

    def draft_len_by_batch(self, max_num_seqs: int) -> list[int]:
        """k per running batch size 0..max_num_seqs: vLLM's dense lookup
        (``build_dynamic_sd_schedule_lookup``): a range's k carried over the gap after it and
        past the last range, never above ``num_speculative_tokens``."""
        k = self.num_speculative_tokens
        if self.per_batch_size is None:
            return [k] * (max_num_seqs + 1)
        out = [k] * (max_num_seqs + 1)
        following, last = 1, k
        for start, end, value in sorted(self.per_batch_size):
            for batch in range(following, min(start, max_num_seqs + 1)):
                out[batch] = min(k, last)
            for batch in range(max(start, following), min(end, max_num_seqs) + 1):
                out[batch] = min(k, value)
            following, last = max(following, end + 1), value
        for batch in range(following, max_num_seqs + 1):
            out[batch] = min(k, last)
        return out


# The longest draft modelled: rampwatch reads this many positions of vLLM's per-position
# counter (loadgen.server.backends.MAX_SPEC_POSITIONS); real drafts are a few to ~30 tokens.
MAX_SPECULATIVE_TOKENS = 64


def _fail(message: str) -> UserError:
    return UserError(f"{FLAG}: {message}")


def _rates(value: Any, key: str) -> list[float]:
    if not isinstance(value, list) or not value:
        raise _fail(f"{key} must be a non-empty list of numbers in [0, 1]")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
            raise _fail(f"{key} must be a non-empty list of numbers in [0, 1], got {json.dumps(value)[:80]}")
        out.append(float(v))
    return out


def _conditional(unconditional: list[float]) -> list[float]:
    """vLLM's unconditional per-position rates as conditional ones."""
    out, before = [], 1.0
    for u in unconditional:
        out.append(u / before if before > 0 else 0.0)
        before = u
    return out


def _per_batch_size(value: Any) -> tuple[tuple[int, int, int], ...]:
    """vLLM's ``num_speculative_tokens_per_batch_size`` checks (spec_decode/dynamic/utils.py)."""
    key = "num_speculative_tokens_per_batch_size"
    if not isinstance(value, list) or not value:
        raise _fail(f"{key} must be a non-empty list of [range_start, range_end, num_speculative_tokens]")
    entries = []
    for entry in value:
        if (
            not isinstance(entry, list)
            or len(entry) != 3
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
        ):
            raise _fail(f"{key}: each entry must be 3 integers [range_start, range_end, num_speculative_tokens]")
        start, end, k = entry
        if start <= 0 or end <= 0 or start > end or k < 0:
            raise _fail(f"{key}: [{start}, {end}, {k}]: ranges must be positive, start <= end, and k >= 0")
        entries.append((start, end, k))
    entries.sort()
    previous_end = 0
    for start, end, _ in entries:
        if start <= previous_end:
            raise _fail(f"{key}: the batch-size ranges must not overlap")
        previous_end = end
    if entries[0][0] != 1:
        raise _fail(f"{key}: the first range must start at 1")
    return tuple(entries)


def _method_of(data: dict[str, Any]) -> str:
    method = data.get("method")
    if method is None:
        model = data.get("model")
        if not isinstance(model, str):
            raise _fail("give a method (ngram, eagle, eagle3, mtp, draft_model, suffix) or a draft model")
        lowered = model.lower()
        return "eagle3" if "eagle3" in lowered else "eagle" if "eagle" in lowered else "draft_model"
    if not isinstance(method, str):
        raise _fail(f"method must be a string, got {json.dumps(method)[:40]}")
    if method.endswith("_mtp"):
        return "mtp"
    method = METHOD_ALIASES.get(method, method)
    if method not in SPEC_PRESETS:
        raise _fail(f"method {method!r}: the simulator models {', '.join(SPEC_PRESETS)} (and vLLM's *_mtp methods)")
    return method


def parse_speculative_config(text: str) -> SpecConfig:
    """``--speculative-config``'s JSON value, checked as vLLM 0.32 checks it (the keys the
    simulator models; unknown keys refused); raises ``UserError`` naming the flag."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _fail(f"not valid JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else 'too deep'})") from None
    if not isinstance(data, dict):
        raise _fail('must be a JSON object, e.g. \'{"method": "ngram", "num_speculative_tokens": 3}\'')
    unknown = sorted(k for k in data if k not in VLLM_KEYS and k not in SIM_KEYS)
    if unknown:
        raise _fail(f"unknown key {unknown[0][:60]!r} (vLLM's SpeculativeConfig has no such field)")
    method = _method_of(data)
    k = data.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise _fail(f"num_speculative_tokens must be an integer >= 1, got {json.dumps(k)[:40]}")
    if k > MAX_SPECULATIVE_TOKENS:
        # 1e9 built a billion rates (gigabytes) before the server started, silently
        raise _fail(f"num_speculative_tokens must be at most {MAX_SPECULATIVE_TOKENS}, got {k}")
    preset = SPEC_PRESETS[method]
    rates = [preset.acceptance[min(i, len(preset.acceptance) - 1)] for i in range(k)]
    if data.get("rejection_sample_method") == "synthetic":
        given_rates, length = data.get("synthetic_acceptance_rates"), data.get("synthetic_acceptance_length")
        if (given_rates is None) == (length is None):
            raise _fail(
                'rejection_sample_method "synthetic" needs exactly one of synthetic_acceptance_rates '
                "or synthetic_acceptance_length"
            )
        if given_rates is not None:
            unconditional = _rates(given_rates, "synthetic_acceptance_rates")
            if len(unconditional) != k or any(b > a for a, b in zip(unconditional, unconditional[1:])):
                raise _fail(f"synthetic_acceptance_rates must hold {k} non-increasing rates")
        else:
            if isinstance(length, bool) or not isinstance(length, (int, float)) or not 1.0 <= length <= k + 1:
                raise _fail(f"synthetic_acceptance_length must be a number in [1, {k + 1}]")
            accepted = length - 1.0  # vLLM's minimum-variance schedule
            full = int(accepted)
            unconditional = ([1.0] * full + [accepted - full] + [0.0] * k)[:k]
        rates = _conditional(unconditional)
    if "acceptance" in data:
        rates = _rates(data["acceptance"], "acceptance")
        if len(rates) != k:
            raise _fail(f"acceptance must hold one conditional rate per position: {k}")
    per_batch = data.get("num_speculative_tokens_per_batch_size")
    return SpecConfig(
        method=method,
        num_speculative_tokens=k,
        acceptance=tuple(rates),
        draft_fraction=preset.draft_fraction,
        ngram_host_s=preset.ngram_host_s,
        per_batch_size=None if per_batch is None else _per_batch_size(per_batch),
        text=text,
    )


@dataclass(slots=True)
class SpecStats:
    """vLLM's ``SpecDecodingStats`` summed since the engine started (its counters)."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


class Speculator:
    """One engine's drafting: how many tokens a step drafts, how many it accepts (seeded),
    what the drafts cost, and the counters."""

    def __init__(self, config: SpecConfig, seed: int, engine_index: int, max_num_seqs: int) -> None:
        self.config = config
        self.k_by_batch = config.draft_len_by_batch(max_num_seqs)
        self.rng = random.Random(hash(("speculation", seed, engine_index)))
        self.stats = SpecStats(accepted_per_pos=[0] * config.num_speculative_tokens)

    def draft_len(self, batch: int) -> int:
        """Tokens each decoding request drafts in a step of ``batch`` running requests."""
        table = self.k_by_batch
        return table[min(max(batch, 0), len(table) - 1)]

    def verify(self, drafted: int) -> int:
        """Accepted drafts of one request's ``drafted`` tokens; counted as vLLM counts them."""
        rates, rng = self.config.acceptance, self.rng
        accepted = 0
        while accepted < drafted and rng.random() < rates[accepted]:
            accepted += 1
        stats = self.stats
        stats.drafts += 1
        stats.draft_tokens += drafted
        stats.accepted_tokens += accepted
        per_pos = stats.accepted_per_pos
        for i in range(accepted):
            per_pos[i] += 1
        return accepted


def draft_cost(
    config: SpecConfig,
    requests: int,
    k: int,
    flops_per_token: float,
    linear_flops: float,
    weight_bytes: float,
    bandwidth: float,
) -> tuple[float, float]:
    """``(gpu seconds, host seconds)`` of drafting ``k`` tokens for ``requests`` requests:
    ``k`` sequential passes of one token each through ``draft_fraction`` of the target's
    weights (each pass max(compute, weight reads)), or the n-gram lookup on the host."""
    if not requests or not k:
        return 0.0, 0.0
    host = config.ngram_host_s * requests
    frac = config.draft_fraction
    if frac <= 0 or math.isinf(linear_flops):
        return 0.0, host
    per_pass = max(frac * flops_per_token * requests / linear_flops, frac * weight_bytes / bandwidth)
    return k * per_pass, host
