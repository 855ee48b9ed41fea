"""Simulator presets and configuration.

Every preset number comes from a public spec sheet or a model's published config;
``docs/sim-presets.md`` lists the source of each. ``SimConfig.resolved()`` derives the
KV-cache size the way vLLM does: (HBM × gpu_memory_utilization − weights − a fixed
activation/runtime reserve) ÷ bytes per KV block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from rampwatch.core.errors import UserError

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class HardwarePreset:
    """One accelerator. Peak figures are the vendor's dense (no sparsity) numbers;
    the efficiency factors say what fraction of peak a real inference step reaches."""

    name: str
    hbm_gib: float  # memory capacity the device exposes
    hbm_bandwidth: float  # bytes/s, peak
    bf16_flops: float  # dense bf16 tensor FLOP/s, peak
    step_overhead_s: float  # fixed per-step cost (scheduling, launch, sampling)
    memory_efficiency: float = 0.8
    compute_efficiency: float = 0.6
    description: str = ""
    # GPU telemetry (`rampwatch sim --gpu-telemetry`): board power idle and at full load
    # (the datasheet's max TDP) in W, SM clock idle and at boost in MHz.
    idle_w: float = 70.0
    tdp_w: float = 700.0
    idle_sm_clock_mhz: float = 345.0
    max_sm_clock_mhz: float = 1980.0

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

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_weight

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V, every layer, every KV head."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_kv_element


INF = math.inf

HARDWARE_PRESETS: dict[str, HardwarePreset] = {
    p.name: p
    for p in (
        HardwarePreset("h100", 80, 3.35e12, 989e12, 0.0015, description="NVIDIA H100 SXM5 80GB"),
        HardwarePreset("h200", 141, 4.8e12, 989e12, 0.0015, description="NVIDIA H200 SXM 141GB", idle_w=75.0),
        HardwarePreset(
            "a100-80g",
            80,
            2.039e12,
            312e12,
            0.002,
            description="NVIDIA A100 SXM4 80GB",
            idle_w=55.0,
            tdp_w=400.0,
            idle_sm_clock_mhz=210.0,
            max_sm_clock_mhz=1410.0,
        ),
        HardwarePreset(
            "a100-40g",
            40,
            1.555e12,
            312e12,
            0.002,
            description="NVIDIA A100 SXM4 40GB",
            idle_w=50.0,
            tdp_w=400.0,
            idle_sm_clock_mhz=210.0,
            max_sm_clock_mhz=1410.0,
        ),
        HardwarePreset(
            "l4",
            24,
            300e9,
            121e12,
            0.002,
            description="NVIDIA L4 24GB",
            idle_w=16.0,
            tdp_w=72.0,
            idle_sm_clock_mhz=210.0,
            max_sm_clock_mhz=2040.0,
        ),
        HardwarePreset("instant", 80, INF, INF, 0.0, description="zero-cost steps: measures the simulator itself"),
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
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    served_model_name: str | None = None
    enable_prefix_caching: bool = True
    eos_probability: float = 0.002
    engines: int = 1
    routing: str = "least-loaded"
    faults: FaultConfig = field(default_factory=FaultConfig)
    # Serve DCGM-exporter-style GPU gauges on /dcgm/metrics (sim.gpu_telemetry); vLLM's own
    # /metrics has none, so it stays as vLLM's.
    gpu_telemetry: bool = False

    @property
    def hardware_preset(self) -> HardwarePreset:
        return _pick("hardware", "--hardware", self.hardware, HARDWARE_PRESETS)

    @property
    def model_preset(self) -> ModelPreset:
        return _pick("model", "--model", self.model, MODEL_PRESETS)

    def resolved(self) -> SimConfig:
        """A copy with every derived field filled in; raises ``UserError`` on bad values."""
        hw, model = self.hardware_preset, self.model_preset
        for flag, value in (
            ("--block-size", self.block_size),
            ("--max-num-seqs", self.max_num_seqs),
            ("--max-num-batched-tokens", self.max_num_batched_tokens),
            ("--engines", self.engines),
        ):
            if value < 1:
                raise UserError(f"{flag} {value}: must be >= 1")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise UserError(f"--gpu-memory-utilization {self.gpu_memory_utilization}: must be in (0, 1]")
        if not self.speed > 0:
            raise UserError(f"--speed {self.speed}: must be > 0")
        if self.routing not in ROUTING_CHOICES:
            raise UserError(f"--routing {self.routing!r}: valid values: {', '.join(ROUTING_CHOICES)}")
        self.faults.validate()
        blocks = self.num_gpu_blocks
        if blocks is None:
            blocks = derive_num_gpu_blocks(hw, model, self.gpu_memory_utilization, self.block_size)
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
        return replace(
            self,
            num_gpu_blocks=blocks,
            max_model_len=max_len,
            served_model_name=self.served_model_name or model.name,
        )


def derive_num_gpu_blocks(hw: HardwarePreset, model: ModelPreset, utilization: float, block_size: int) -> int:
    """KV blocks that fit in what is left of the memory budget after weights and reserve."""
    budget = hw.hbm_gib * GIB * utilization - model.weight_bytes - model.runtime_reserve_gib * GIB
    return max(0, int(budget // (model.kv_bytes_per_token * block_size)))
