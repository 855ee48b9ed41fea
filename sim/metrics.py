"""``/metrics`` for the simulator: vLLM 0.32's family names, types and labels.

A custom collector reads each engine's ``EngineStats`` at scrape time, so the hot path
(one histogram observation per token) never touches prometheus_client's locks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.samples import Sample

from rampwatch.sim.engine import Engine
from rampwatch.sim.lora import LoraInfo, adapters_of
from rampwatch.sim.stats import Hist

_LABELS = ["engine", "model_name"]

_HISTOGRAMS = (
    # (family, EngineStats attribute, help)
    ("vllm:request_prompt_tokens", "request_prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:request_generation_tokens", "request_generation_tokens", "Number of generation tokens processed."),
    ("vllm:iteration_tokens_total", "iteration_tokens", "Histogram of number of tokens per engine_step."),
    (
        "vllm:request_max_num_generation_tokens",
        "request_max_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
    ),
    ("vllm:request_params_n", "params_n", "Histogram of the n request parameter."),
    ("vllm:request_params_max_tokens", "request_params_max_tokens", "Histogram of the max_tokens request parameter."),
    ("vllm:time_to_first_token_seconds", "ttft", "Histogram of time to first token in seconds."),
    ("vllm:inter_token_latency_seconds", "itl", "Histogram of inter-token latency in seconds."),
    (
        "vllm:request_time_per_output_token_seconds",
        "tpot",
        "Histogram of time_per_output_token_seconds per request.",
    ),
    ("vllm:e2e_request_latency_seconds", "e2e", "Histogram of e2e request latency in seconds."),
    ("vllm:request_queue_time_seconds", "queue", "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_inference_time_seconds", "inference", "Histogram of time spent in RUNNING phase for request."),
    ("vllm:request_prefill_time_seconds", "prefill", "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_decode_time_seconds", "decode", "Histogram of time spent in DECODE phase for request."),
    ("vllm:request_num_preemptions", "num_preemptions", "Number of preemptions per request."),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "request_prefill_kv_computed",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    ),
)


def cache_config_labels(engine: Engine) -> dict[str, str]:
    """Same label names as vLLM 0.32's ``vllm:cache_config_info``, with the simulator's values."""
    cfg = engine.config
    blocks = engine.capacity.num_gpu_blocks
    size_tokens = blocks * cfg.block_size
    return {
        "_block_size_resolved": "True",
        "block_size": str(cfg.block_size),
        "cache_dtype": cfg.kv_cache_dtype,
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(cfg.block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
        "engine": str(engine.index),
        "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(round(size_tokens / engine.capacity.max_model_len, 2)),
        "kv_cache_memory_bytes": str(int(size_tokens * cfg.kv_bytes_per_token_per_gpu)),
        "kv_cache_size_tokens": str(size_tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(blocks),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }


def _histogram(name: str, help_text: str, per_engine: list[tuple[list[str], Hist, float]]):
    family = HistogramMetricFamily(name, help_text, labels=_LABELS)
    created = []
    for labels, hist, created_at in per_engine:
        family.add_metric(labels, hist.cumulative(), hist.total)
        created.append(Sample(name + "_created", dict(zip(_LABELS, labels)), created_at))
    family.samples.extend(created)
    return family


class SimCollector:
    """Builds the vLLM metric families from live engines on every scrape."""

    def __init__(self, engines: Sequence[Engine], model_name: str) -> None:
        self.engines = engines
        self.model_name = model_name
        lora = engines[0].config.lora if engines else None
        self.lora_info = LoraInfo(lora.max_loras) if lora is not None and lora.enable_lora else None

    def collect(self):
        engines = self.engines
        labelled = [([str(e.index), self.model_name], e) for e in engines]

        def gauge(name, help_text, value_of):
            g = GaugeMetricFamily(name, help_text, labels=_LABELS)
            for labels, e in labelled:
                g.add_metric(labels, value_of(e))
            return g

        def counter(name, help_text, value_of):
            c = CounterMetricFamily(name, help_text, labels=_LABELS)
            for labels, e in labelled:
                c.add_metric(labels, value_of(e), created=e.stats.created)
            return c

        yield gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", lambda e: e.num_running
        )
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda e: e.num_waiting)
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason.",
            labels=[*_LABELS, "reason"],
        )
        for labels, e in labelled:
            by_reason.add_metric([*labels, "capacity"], e.num_waiting)
            by_reason.add_metric([*labels, "deferred"], 0)
        yield by_reason
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lambda e: e.kv_usage())
        yield counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            lambda e: e.stats.prefix_queries,
        )
        yield counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            lambda e: e.stats.prefix_hits,
        )
        yield counter(
            "vllm:mm_cache_queries",
            "Multi-modal cache queries, in terms of number of queried items.",
            lambda e: e.stats.mm_cache_queries,
        )
        yield counter(
            "vllm:mm_cache_hits",
            "Multi-modal cache hits, in terms of number of cached items.",
            lambda e: e.stats.mm_cache_hits,
        )
        yield counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", lambda e: e.stats.preemptions
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lambda e: e.stats.prompt_tokens)
        by_source = CounterMetricFamily(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", labels=[*_LABELS, "source"]
        )
        for labels, e in labelled:
            s = e.stats
            for source, value in (
                ("local_compute", s.prompt_tokens - s.prompt_tokens_cached),
                ("local_cache_hit", s.prompt_tokens_cached),
                ("external_kv_transfer", 0),
            ):
                by_source.add_metric([*labels, source], value, created=s.created)
        yield by_source
        yield counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            lambda e: e.stats.prompt_tokens_cached,
        )
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", lambda e: e.stats.generation_tokens
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["engine", "finished_reason", "model_name"],
        )
        for labels, e in labelled:
            for reason, value in e.stats.finished.items():
                success.add_metric([labels[0], reason, labels[1]], value, created=e.stats.created)
        yield success
        for name, attr, help_text in _HISTOGRAMS:
            yield _histogram(
                name, help_text, [(labels, getattr(e.stats, attr), e.stats.created) for labels, e in labelled]
            )
        yield from spec_decode_families(labelled)
        info = None
        for e in engines:
            cache_labels = cache_config_labels(e)
            if info is None:
                info = GaugeMetricFamily(
                    "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(cache_labels)
                )
            info.add_metric(list(cache_labels.values()), 1.0)
        if info is not None:
            yield info
        if self.lora_info is not None:
            yield lora_info_family(self.lora_info, engines)


def spec_decode_families(labelled: list[tuple[list[str], Engine]]):
    """vLLM 0.32's ``SpecDecodingProm`` counters, only from engines that speculate (vLLM
    registers none without ``--speculative-config``); one per-position series per draft
    position, ``position`` "0".."k-1"."""
    speculating = [(labels, e, e.speculator) for labels, e in labelled if e.speculator is not None]
    if not speculating:
        return
    for name, help_text, attr in (
        ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "drafts"),
        ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", "draft_tokens"),
        ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", "accepted_tokens"),
    ):
        c = CounterMetricFamily(name, help_text, labels=_LABELS)
        for labels, e, spec in speculating:
            c.add_metric(labels, getattr(spec.stats, attr), created=e.stats.created)
        yield c
    per_pos = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        labels=[*_LABELS, "position"],
    )
    for labels, e, spec in speculating:
        for position, value in enumerate(spec.stats.accepted_per_pos):
            per_pos.add_metric([*labels, str(position)], value, created=e.stats.created)
    yield per_pos


def make_registry(engines: Sequence[Engine], model_name: str) -> CollectorRegistry:
    """A private registry (never the global one) holding the simulator's families."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimCollector(engines, model_name))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def lora_info_family(info: LoraInfo, engines: Sequence[Engine]) -> GaugeMetricFamily:
    """``vllm:lora_requests_info`` as vLLM exports it: the engines' running and waiting
    adapters now (set to the current time), and every state before it (``sim.lora``)."""
    running = adapters_of(r for e in engines for r in e.running)
    waiting = adapters_of(r for e in engines for r in e.waiting)
    info.update(running, waiting, time.time())
    family = GaugeMetricFamily(
        "vllm:lora_requests_info",
        "Running stats on lora requests.",
        labels=["max_lora", "waiting_lora_adapters", "running_lora_adapters"],
    )
    for labels, value in info.samples():
        family.add_metric([labels["max_lora"], labels["waiting_lora_adapters"], labels["running_lora_adapters"]], value)
    return family
