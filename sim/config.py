"""Simulator presets and configuration.

Peak figures come from public spec sheets and models' published configs; the achieved
fractions of peak and the host costs are calibrated against published vLLM results
(``sim/calibration.py``). ``docs/sim-presets.md`` gives the source of each number. ``SimConfig.resolved()`` derives the
KV-cache size the way vLLM does: (HBM × gpu_memory_utilization − weights − a fixed
activation/runtime reserve) ÷ bytes per KV block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from rampwatch.core.errors import UserError
from rampwatch.sim.lora import LoraConfig
from rampwatch.sim.reasoning import ReasoningConfig
from rampwatch.sim.speculation import SpecConfig, parse_speculative_config

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class HardwarePreset:
    """One accelerator and the vLLM host that drives it. Peak figures are the vendor's dense
    (no sparsity) numbers; the efficiency factors say what fraction of peak a real inference
    step reaches, per kind of work."""

    name: str
    hbm_gib: float  # memory capacity the device exposes
    hbm_bandwidth: float  # bytes/s, peak
    bf16_flops: float  # dense bf16 tensor FLOP/s, peak
    # Dense FP8 tensor FLOP/s, peak; 0 where the tensor cores have no FP8 (Ampere): FP8
    # weights are then dequantised to bf16 (weight-only kernels) and compute at bf16 rate.
    fp8_flops: float
    # Tensor-parallel all-reduce link: bytes/s one way per GPU, and the latency of one hop
    # of a ring all-reduce (2(tp-1) hops per call), which dominates decode-sized messages.
    link_bandwidth: float
    allreduce_hop_latency_s: float
    step_overhead_s: float  # fixed per-step host cost (scheduling, input preparation, launch)
    # Host cost per request in a step: sampling, output processing, detokenisation and
    # the API server's per-token streaming, which grow with the batch.
    per_request_overhead_s: float
    memory_efficiency: float = 0.8  # weight reads (large contiguous GEMM operands)
    compute_efficiency: float = 0.6
    # KV reads in paged attention: scattered 16-token blocks, a different kernel per
    # architecture (FlashAttention 3 on Hopper, 2 on Ampere), so its own fraction of peak.
    attention_efficiency: float = 0.8
    description: str = ""
    # GPU telemetry (`rampwatch sim --gpu-telemetry`): board power idle and at full load
    # (the datasheet's max TDP) in W, SM clock idle and at boost in MHz.
    idle_w: float = 70.0
    tdp_w: float = 700.0
    idle_sm_clock_mhz: float = 345.0
    max_sm_clock_mhz: float = 1980.0

    def flops_for(self, fp8_weights: bool) -> float:
        """Peak FLOP/s of the weight GEMMs: FP8 where the tensor cores have it."""
        return self.fp8_flops if fp8_weights and self.fp8_flops else self.bf16_flops

    @property
    def instant(self) -> bool:
        return math.isinf(self.hbm_bandwidth) and math.isinf(self.bf16_flops)


@dataclass(frozen=True, slots=True)
class ModelPreset:
    """A decoder-only transformer, as its config.json describes it."""

    name: str
    params: float  # total parameters
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    bytes_per_weight: float
    bytes_per_kv_element: float
    max_position_embeddings: int
    # Activation peak + CUDA context + non-torch allocations that vLLM's memory
    # profiling sets aside before sizing the KV cache.
    runtime_reserve_gib: float = 2.0
    description: str = ""
    # A vision-language model's vision encoder (sim.multimodal): its weights are held
    # beside the language model's; 0 for a text-only model.
    vision_params: float = 0.0

    @property
    def weight_bytes(self) -> float:
        return (self.params + self.vision_params) * self.bytes_per_weight

    @property
    def fp8_weights(self) -> bool:
        return self.bytes_per_weight == 1

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, every layer, every KV head, in the model's own KV dtype."""
        return self.kv_bytes_per_token_as(self.bytes_per_kv_element)

    def kv_bytes_per_token_as(self, bytes_per_element: float, tensor_parallel_size: int = 1) -> float:
        """K and V bytes per token on one GPU of a tensor-parallel group: the KV heads are split
        across the group, and replicated when the group is larger than the number of KV heads."""
        heads = -(-self.num_kv_heads // tensor_parallel_size)
        return 2 * self.num_layers * heads * self.head_dim * bytes_per_element


INF = math.inf

_H100 = HardwarePreset(
    "h100",
    80,
    3.35e12,
    989e12,
    fp8_flops=1979e12,
    link_bandwidth=450e9,
    allreduce_hop_latency_s=3e-6,
    step_overhead_s=0.0005,
    per_request_overhead_s=40e-6,
    memory_efficiency=0.9,
    compute_efficiency=0.42,
    attention_efficiency=0.5,
    description="NVIDIA H100 SXM5 80GB",
)

_A100_80G = HardwarePreset(
    "a100-80g",
    80,
    2.039e12,
    312e12,
    fp8_flops=0.0,
    link_bandwidth=300e9,
    allreduce_hop_latency_s=3e-6,
    step_overhead_s=0.0005,
    per_request_overhead_s=40e-6,
    memory_efficiency=0.9,
    compute_efficiency=0.42,
    attention_efficiency=0.2,
    description="NVIDIA A100 SXM4 80GB",
    idle_w=55.0,
    tdp_w=400.0,
    idle_sm_clock_mhz=210.0,
    max_sm_clock_mhz=1410.0,
)


HARDWARE_PRESETS: dict[str, HardwarePreset] = {
    p.name: p
    for p in (
        _H100,
        # The same chip as the H100 SXM (same tensor throughput and host): more and faster memory.
        replace(
            _H100, name="h200", hbm_gib=141, hbm_bandwidth=4.8e12, description="NVIDIA H200 SXM 141GB", idle_w=75.0
        ),
        _A100_80G,
        # The 80GB board with less, slower memory (and a lower idle draw).
        replace(
            _A100_80G,
            name="a100-40g",
            hbm_gib=40,
            hbm_bandwidth=1.555e12,
            description="NVIDIA A100 SXM4 40GB",
            idle_w=50.0,
        ),
        HardwarePreset(
            "l4",
            24,
            300e9,
            121e12,
            fp8_flops=242e12,
            link_bandwidth=32e9,
            allreduce_hop_latency_s=5e-6,
            step_overhead_s=0.0005,
            per_request_overhead_s=40e-6,
            memory_efficiency=0.8,
            compute_efficiency=0.6,
            attention_efficiency=0.8,
            description="NVIDIA L4 24GB",
            idle_w=16.0,
            tdp_w=72.0,
            idle_sm_clock_mhz=210.0,
            max_sm_clock_mhz=2040.0,
        ),
        HardwarePreset(
            "instant",
            80,
            INF,
            INF,
            fp8_flops=INF,
            link_bandwidth=INF,
            allreduce_hop_latency_s=0.0,
            step_overhead_s=0.0,
            per_request_overhead_s=0.0,
            description="zero-cost steps: measures the simulator itself",
        ),
    )
}

MODEL_PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            "llama-3.1-8b",
            8.03e9,
            32,
            4096,
            32,
            8,
            128,
            2,
            2,
            131072,
            description="meta-llama/Llama-3.1-8B-Instruct, bf16 weights and KV cache",
        ),
        ModelPreset(
            "llama-3.1-8b-fp8",
            8.03e9,
            32,
            4096,
            32,
            8,
            128,
            1,
            2,
            131072,
            description="Llama-3.1-8B-Instruct FP8 weights (bf16 KV cache, vLLM's default kv_cache_dtype=auto)",
        ),
        ModelPreset(
            "mistral-7b",
            7.248e9,
            32,
            4096,
            32,
            8,
            128,
            2,
            2,
            32768,
            description="mistralai/Mistral-7B-Instruct-v0.3, bf16 weights and KV cache",
        ),
        ModelPreset(
            "qwen2-vl-7b",
            7.62e9,
            28,
            3584,
            28,
            4,
            128,
            2,
            2,
            32768,
            vision_params=0.675e9,
            description="Qwen/Qwen2-VL-7B-Instruct, bf16: takes images (sim.multimodal: Qwen2-VL's image tokens)",
        ),
        ModelPreset(
            "tiny",
            4.0e6,
            2,
            64,
            4,
            4,
            16,
            2,
            2,
            2048,
            runtime_reserve_gib=0.0,
            description="a tiny random Llama like the one in the CPU captures; for quick tests",
        ),
    )
}


# Hugging Face ids that `vllm serve MODEL` takes, mapped to the preset with the same
# architecture and weight dtype, so `rampwatch sim MODEL …` takes the same first argument.
MODEL_ALIASES: dict[str, str] = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b-fp8",
    "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b-fp8",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b-fp8",
    "mistralai/Mistral-7B-Instruct-v0.3": "mistral-7b",
    "mistralai/Mistral-7B-v0.3": "mistral-7b",
    "Qwen/Qwen2-VL-7B-Instruct": "qwen2-vl-7b",
}


def model_preset_for(tag: str) -> str | None:
    """The preset a model tag names (a preset name or a known Hugging Face id, any case)."""
    if tag in MODEL_PRESETS:
        return tag
    folded = {k.lower(): v for k, v in MODEL_ALIASES.items()}
    return folded.get(tag.lower())


def _pick(kind: str, flag: str, name: str, table: dict):
    try:
        return table[name]
    except KeyError:
        raise UserError(f"{flag} {name!r}: unknown {kind} preset; valid values: {', '.join(sorted(table))}") from None


@dataclass(slots=True)
class FaultConfig:
    """Seeded fault injection. Rates are probabilities in 0..1."""

    error_rate: float = 0.0  # completions answered with HTTP 500
    abort_rate: float = 0.0  # streams cut mid-way (connection closed, no [DONE])
    metrics_error_rate: float = 0.0  # /metrics answered with HTTP 500
    stall_at: float | None = None  # simulated seconds after start when the engines stall
    stall_for: float = 0.0  # how long the stall lasts (requests queue meanwhile)

    def validate(self) -> None:
        for flag, value in (
            ("--error-rate", self.error_rate),
            ("--abort-rate", self.abort_rate),
            ("--metrics-error-rate", self.metrics_error_rate),
        ):
            if not 0.0 <= value <= 1.0:
                raise UserError(f"{flag} {value}: must be between 0 and 1")
        if self.stall_at is not None and self.stall_at < 0:
            raise UserError(f"--stall-at {self.stall_at}: must be >= 0")
        if self.stall_for < 0:
            raise UserError(f"--stall-for {self.stall_for}: must be >= 0")


ROUTING_CHOICES = ("least-loaded", "round-robin")
# vLLM's spellings; every fp8 variant stores one byte per element.
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True, slots=True)
class Capacity:
    """A resolved config's sizes, which engines and the front end compute with."""

    num_gpu_blocks: int
    max_model_len: int
    max_num_batched_tokens: int


@dataclass(slots=True)
class SimConfig:
    """Everything a simulated server needs. ``None`` fields are derived by ``resolved()``.

    hardware / model: preset names (``HARDWARE_PRESETS`` / ``MODEL_PRESETS``).
    speed: simulated seconds per wall second (2.0 runs twice as fast as real time).
    eos_probability: per-token chance of stopping early when ``ignore_eos`` is false.
    """

    hardware: str = "h100"
    model: str = "llama-3.1-8b"
    seed: int = 0
    speed: float = 1.0
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None  # None: 8192, raised to max_model_len without chunked prefill
    max_model_len: int | None = None
    served_model_name: str | None = None
    enable_prefix_caching: bool = True
    eos_probability: float = 0.002
    # Host costs; None takes the hardware preset's (a vLLM v1 host of that machine class).
    step_overhead_s: float | None = None
    per_request_overhead_s: float | None = None
    engines: int = 1  # data-parallel ranks (vLLM's --data-parallel-size)
    tensor_parallel_size: int = 1
    enable_chunked_prefill: bool = True
    kv_cache_dtype: str = "auto"
    routing: str = "least-loaded"
    faults: FaultConfig = field(default_factory=FaultConfig)
    # Serve DCGM-exporter-style GPU gauges on /dcgm/metrics (sim.gpu_telemetry); vLLM's own
    # /metrics has none, so it stays as vLLM's.
    gpu_telemetry: bool = False
    # vLLM's --enable-prompt-tokens-details: a request's usage carries its prefix-cache
    # hit as prompt_tokens_details.cached_tokens (off by default, as in vLLM).
    enable_prompt_tokens_details: bool = False
    # Images (sim.multimodal): vLLM's --limit-mm-per-prompt for images (its default 999)
    # and --mm-processor-cache-gb (0: no processor cache).
    limit_mm_images: int = 999
    mm_processor_cache_gb: float = 4.0
    # vLLM's --enable-lora --max-loras --max-lora-rank --max-cpu-loras --lora-modules (sim.lora).
    lora: LoraConfig = field(default_factory=LoraConfig)
    # vLLM's --speculative-config, its JSON text as given (sim.speculation); None: no speculation.
    speculative_config: str | None = None

    @property
    def speculation(self) -> SpecConfig | None:
        """The parsed ``speculative_config`` (raises ``UserError`` on a bad one)."""
        return None if self.speculative_config is None else parse_speculative_config(self.speculative_config)

    # vLLM's --reasoning-parser: chat answers think first (sim.reasoning); None: they do not.
    reasoning: ReasoningConfig | None = None

    @property
    def kv_bytes_per_element(self) -> float:
        """``auto`` keeps the model's KV dtype; every fp8 variant stores one byte."""
        return self.model_preset.bytes_per_kv_element if self.kv_cache_dtype == "auto" else 1.0

    @property
    def kv_bytes_per_token_per_gpu(self) -> float:
        return self.model_preset.kv_bytes_per_token_as(self.kv_bytes_per_element, self.tensor_parallel_size)

    @property
    def hardware_preset(self) -> HardwarePreset:
        return _pick("hardware", "--hardware", self.hardware, HARDWARE_PRESETS)

    @property
    def model_preset(self) -> ModelPreset:
        return _pick("model", "--model", self.model, MODEL_PRESETS)

    def capacity(self) -> Capacity:
        """The sizes ``resolved()`` derives, as plain ints; the config must be resolved."""
        blocks, max_len, budget = self.num_gpu_blocks, self.max_model_len, self.max_num_batched_tokens
        if blocks is None or max_len is None or budget is None:
            raise ValueError("capacity() of an unresolved SimConfig: call resolved() first")
        return Capacity(num_gpu_blocks=blocks, max_model_len=max_len, max_num_batched_tokens=budget)

    def resolved(self) -> SimConfig:
        """A copy with every derived field filled in; raises ``UserError`` on bad values."""
        hw, model = self.hardware_preset, self.model_preset
        for flag, value in (
            ("--block-size", self.block_size),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", 1 if self.max_num_batched_tokens is None else self.max_num_batched_tokens),
            ("--data-parallel-size/--engines", self.engines),
            ("--tensor-parallel-size", self.tensor_parallel_size),
        ):
            if value < 1:
                raise UserError(f"{flag} {value}: must be >= 1")
        if model.num_attention_heads % self.tensor_parallel_size:
            raise UserError(
                f"--tensor-parallel-size {self.tensor_parallel_size}: must divide the {model.name} model's "
                f"{model.num_attention_heads} attention heads"
            )
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise UserError(f"--kv-cache-dtype {self.kv_cache_dtype!r}: valid values: {', '.join(KV_CACHE_DTYPES)}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise UserError(f"--gpu-memory-utilization {self.gpu_memory_utilization}: must be in (0, 1]")
        for flag, overhead in (
            ("--step-overhead-ms", self.step_overhead_s),
            ("--per-request-overhead-us", self.per_request_overhead_s),
        ):
            if overhead is not None and not overhead >= 0:
                raise UserError(f"{flag}: must be >= 0")
        if self.limit_mm_images < 0:
            raise UserError(f"--limit-mm-per-prompt: the image limit {self.limit_mm_images} must be >= 0")
        if not self.mm_processor_cache_gb >= 0:
            raise UserError(f"--mm-processor-cache-gb {self.mm_processor_cache_gb}: must be >= 0")
        if not self.speed > 0:
            raise UserError(f"--speed {self.speed}: must be > 0")
        if self.routing not in ROUTING_CHOICES:
            raise UserError(f"--routing {self.routing!r}: valid values: {', '.join(ROUTING_CHOICES)}")
        self.faults.validate()
        self.lora.validate()
        _ = self.speculation  # a bad --speculative-config is refused before anything starts
        if self.reasoning is not None:
            self.reasoning.validate()
        blocks = self.num_gpu_blocks
        if blocks is None:
            blocks = derive_num_gpu_blocks(
                hw,
                model,
                self.gpu_memory_utilization,
                self.block_size,
                tensor_parallel_size=self.tensor_parallel_size,
                kv_bytes_per_element=self.kv_bytes_per_element,
            )
            if blocks < 1:
                raise UserError(
                    f"--model {model.name} does not fit on --hardware {hw.name} at "
                    f"--gpu-memory-utilization {self.gpu_memory_utilization}: no memory left for the KV cache"
                )
        elif blocks < 1:
            raise UserError(f"--num-gpu-blocks {blocks}: must be >= 1")
        max_len = self.max_model_len
        if max_len is None:
            # vLLM refuses to start when the KV cache cannot hold one max-length request;
            # the simulator shrinks the default instead so every preset pair starts.
            max_len = min(model.max_position_embeddings, blocks * self.block_size)
        elif max_len < 1:
            raise UserError(f"--max-model-len {max_len}: must be >= 1")
        elif max_len > blocks * self.block_size:
            raise UserError(
                f"--max-model-len {max_len}: the KV cache holds only {blocks * self.block_size} tokens "
                f"({blocks} blocks of {self.block_size}); lower --max-model-len or raise --num-gpu-blocks"
            )
        budget = self.max_num_batched_tokens
        if budget is None:
            # vLLM raises its default budget to the context length when prefills cannot be
            # chunked (engine/arg_utils.py), and refuses an explicit budget below it.
            budget = (
                DEFAULT_MAX_NUM_BATCHED_TOKENS
                if self.enable_chunked_prefill
                else max(max_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
            )
        elif not self.enable_chunked_prefill and budget < max_len:
            raise UserError(
                f"--max-num-batched-tokens {budget}: without chunked prefill it must be >= --max-model-len "
                f"{max_len} (a prompt is prefilled in one step); raise it, lower --max-model-len, or drop "
                "--no-enable-chunked-prefill"
            )
        return replace(
            self,
            num_gpu_blocks=blocks,
            max_model_len=max_len,
            max_num_batched_tokens=budget,
            served_model_name=self.served_model_name or model.name,
        )


DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


def derive_num_gpu_blocks(
    hw: HardwarePreset,
    model: ModelPreset,
    utilization: float,
    block_size: int,
    tensor_parallel_size: int = 1,
    kv_bytes_per_element: float | None = None,
) -> int:
    """KV blocks that fit in what is left of the memory budget after weights and reserve.

    Each GPU of a tensor-parallel group holds 1/N of the weights and the KV of its share of
    the KV heads, so a block (all layers, all heads) spans the group; the pool is sized by
    one GPU's free memory, as vLLM takes the minimum over the workers."""
    per_element = model.bytes_per_kv_element if kv_bytes_per_element is None else kv_bytes_per_element
    budget = (
        hw.hbm_gib * GIB * utilization - model.weight_bytes / tensor_parallel_size - model.runtime_reserve_gib * GIB
    )
    per_block = model.kv_bytes_per_token_as(per_element, tensor_parallel_size) * block_size
    return max(0, int(budget // per_block))
