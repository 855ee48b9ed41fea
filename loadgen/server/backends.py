"""Which server exported a ``/metrics`` page, and how its metrics map to ``ServerSample``.

See ``shared/reference/server-metrics.md`` (mirrored in docs) for the sources. The maps
below name, for each ``ServerSample`` field, the exact sample name to read. Values are
summed over every label set (``engine`` for vLLM data parallelism, ``model_name``...),
except ``kv_usage`` which is averaged (each engine reports the fraction of its own pool).
Derived fields:

- TGI has no token counters: prompt/generation totals are the ``_sum`` of its request
  input-length and generated-token histograms; KV usage is the proxy
  ``tgi_batch_current_max_tokens / tgi_batch_max_total_tokens``.
- llama.cpp's ``prompt_tokens_total`` excludes cached tokens, so prefix queries are
  ``prompt_tokens_cached_total + prompt_tokens_total`` and hits the cached part.
- SGLang's prefix queries are its prompt tokens and hits its cached tokens.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from rampwatch.core.figures.counters import COUNTER_FIELDS

# (name, labels, value) as read from the exposition.
Sample = tuple[str, dict[str, str], float]

GAUGE_FIELDS = ("running", "waiting", "kv_usage")

FIELD_MAPS: dict[str, dict[str, str]] = {
    "vllm": {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_usage": "vllm:kv_cache_usage_perc",
        "prompt_tokens_total": "vllm:prompt_tokens_total",
        "prompt_tokens_computed_total": 'vllm:prompt_tokens_by_source_total{source="local_compute"}',
        "generation_tokens_total": "vllm:generation_tokens_total",
        "prefix_queries_total": "vllm:prefix_cache_queries_total",
        "prefix_hits_total": "vllm:prefix_cache_hits_total",
        "preemptions_total": "vllm:num_preemptions_total",
        "spec_drafts_total": "vllm:spec_decode_num_drafts_total",
        "spec_draft_tokens_total": "vllm:spec_decode_num_draft_tokens_total",
        "spec_accepted_tokens_total": "vllm:spec_decode_num_accepted_tokens_total",
        "mm_cache_queries_total": "vllm:mm_cache_queries_total",
        "mm_cache_hits_total": "vllm:mm_cache_hits_total",
    },
    "vllm-legacy": {
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "kv_usage": "vllm:gpu_cache_usage_perc",
        "prompt_tokens_total": "vllm:prompt_tokens_total",
        "generation_tokens_total": "vllm:generation_tokens_total",
        "prefix_queries_total": "vllm:gpu_prefix_cache_queries_total",
        "prefix_hits_total": "vllm:gpu_prefix_cache_hits_total",
        "preemptions_total": "vllm:num_preemptions_total",
    },
    "sglang": {
        "running": "sglang:num_running_reqs",
        "waiting": "sglang:num_queue_reqs",
        "kv_usage": "sglang:token_usage",
        "prompt_tokens_total": "sglang:prompt_tokens_total",
        "generation_tokens_total": "sglang:generation_tokens_total",
        "prefix_queries_total": "sglang:prompt_tokens_total",
        "prefix_hits_total": "sglang:cached_tokens_total",
    },
    "tgi": {
        "running": "tgi_batch_current_size",
        "waiting": "tgi_queue_size",
        "prompt_tokens_total": "tgi_request_input_length_sum",
        "generation_tokens_total": "tgi_request_generated_tokens_sum",
    },
    "llamacpp": {
        "running": "llamacpp:requests_processing",
        "waiting": "llamacpp:requests_deferred",
        "prompt_tokens_total": "llamacpp:prompt_tokens_total",
        "generation_tokens_total": "llamacpp:tokens_predicted_total",
        "prefix_hits_total": "llamacpp:prompt_tokens_cached_total",
    },
}

# The counter whose `_created` identifies the exporting process (prometheus_client only).
CREATED_SAMPLE = {
    "vllm": "vllm:generation_tokens_created",
    "vllm-legacy": "vllm:generation_tokens_created",
}

# Sample-name prefixes worth parsing at all; everything else is skipped before parsing.
PREFIXES = ("vllm:", "sglang:", "tgi_", "llamacpp:")

# Histograms whose buckets are kept in ServerSample.raw (server-side latency quantiles);
# other histograms keep only `_sum` and `_count` to bound the recording's size.
RAW_BUCKET_FAMILIES = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)


def detect_backend(names: Iterable[str]) -> str:
    """``vllm``, ``vllm-legacy``, ``sglang``, ``tgi``, ``llamacpp`` or ``unknown``."""
    names = set(names)
    if "vllm:kv_cache_usage_perc" in names:
        return "vllm"
    if "vllm:gpu_cache_usage_perc" in names:
        return "vllm-legacy"
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("sglang:") for n in names):
        return "sglang"
    if any(n.startswith("llamacpp:") for n in names):
        return "llamacpp"
    if any(n.startswith("tgi_") for n in names):
        return "tgi"
    return "unknown"


def _engine_of(labels: dict[str, str]) -> str | None:
    return labels.get("engine")


_SELECTOR = re.compile(r'(\w+)="([^"]*)"')


@functools.cache
def _fields_by_sample_name(backend: str) -> dict[str, list[tuple[str, tuple[tuple[str, str], ...]]]]:
    """sample name -> [(field, label selector)] for ``backend``; a map entry may select
    series by label, as in ``name{source="local_compute"}``."""
    out: dict[str, list[tuple[str, tuple[tuple[str, str], ...]]]] = {}
    for field_name, spec in FIELD_MAPS.get(backend, {}).items():
        name, _, labels = spec.partition("{")
        out.setdefault(name, []).append((field_name, tuple(_SELECTOR.findall(labels))))
    return out


def extract_fields(
    backend: str, samples: list[Sample]
) -> tuple[dict[str, float | None], dict[str, dict[str, float]], float | None]:
    """``(fields, per_engine, created)`` for one scrape of ``backend``.

    ``fields`` has every ServerSample gauge/counter field (``None`` when not exported);
    ``per_engine`` maps the vLLM ``engine`` label to the same fields (only when the label
    is present); ``created`` is the largest ``_created`` of the identity counter.
    """
    by_name = _fields_by_sample_name(backend)

    sums: dict[str, float] = {}
    kv_values: list[float] = []
    engines: dict[str, dict[str, float]] = {}
    engine_kv: dict[str, list[float]] = {}
    extra: dict[str, float] = {}
    created: float | None = None
    created_name = CREATED_SAMPLE.get(backend)
    for name, labels, value in samples:
        if name == created_name:
            created = value if created is None else max(created, value)
            continue
        wanted = by_name.get(name)
        if wanted is None:
            if name in _EXTRA_NAMES:
                extra[name] = extra.get(name, 0.0) + value
            continue
        engine = _engine_of(labels)
        for field_name, selector in wanted:
            if any(labels.get(k) != v for k, v in selector):
                continue
            if field_name == "kv_usage":
                kv_values.append(value)
                if engine is not None:
                    engine_kv.setdefault(engine, []).append(value)
                continue
            sums[field_name] = sums.get(field_name, 0.0) + value
            if engine is not None:
                per = engines.setdefault(engine, {})
                per[field_name] = per.get(field_name, 0.0) + value

    fields_out: dict[str, float | None] = {f: sums.get(f) for f in GAUGE_FIELDS + COUNTER_FIELDS if f != "kv_usage"}
    fields_out["kv_usage"] = sum(kv_values) / len(kv_values) if kv_values else None
    for engine, values in engine_kv.items():
        engines.setdefault(engine, {})["kv_usage"] = sum(values) / len(values)

    if backend == "tgi":
        used, total = extra.get("tgi_batch_current_max_tokens"), extra.get("tgi_batch_max_total_tokens")
        if used is not None and total:
            fields_out["kv_usage"] = used / total
    elif backend == "llamacpp":
        hits, prompt = fields_out.get("prefix_hits_total"), fields_out.get("prompt_tokens_total")
        if hits is not None and prompt is not None:
            fields_out["prefix_queries_total"] = hits + prompt
        elif hits is None:
            fields_out["prefix_queries_total"] = None
    return fields_out, engines, created


_EXTRA_NAMES = frozenset({"tgi_batch_current_max_tokens", "tgi_batch_max_total_tokens"})

# vLLM's accepted draft tokens by draft position (``position`` "0".."k-1"), per engine.
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
MAX_SPEC_POSITIONS = 64  # more positions than any draft has: a hostile page's thousands are not kept


def accepted_by_position(samples: list[Sample]) -> dict[str, float]:
    """``{"0": n, "1": n, …}``: accepted draft tokens by position, summed over engines (and
    every other label); positions that are not small non-negative integers are skipped."""
    out: dict[str, float] = {}
    for name, labels, value in samples:
        if name != SPEC_PER_POSITION:
            continue
        position = labels.get("position", "")
        if not (position.isascii() and position.isdigit()) or int(position) >= MAX_SPEC_POSITIONS:
            continue
        key = str(int(position))
        out[key] = out.get(key, 0.0) + value
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))
