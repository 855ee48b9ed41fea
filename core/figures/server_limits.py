"""The limits a knee can be explained by (``ServerLimits``): what a run knows of the
server's batch cap, token budget and KV cache, from the ``vllm serve`` command line
(with vLLM's defaults for the device), the server's ``vllm:cache_config_info`` and the
run's own ``--max-concurrency``."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.figures.summary import concurrency_cap
from rampwatch.core.timeline import RunHeader


# vLLM's defaults for the OpenAI server when --max-num-batched-tokens / --max-num-seqs
# are absent: vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults and
# _set_default_max_num_seqs_and_batched_tokens_args, vLLM 0.32.0 (read from the installed
# package). They depend on the device, which a command line does not say.
def vllm_batch_defaults(
    device_memory_gib: float | None, device_name: str = "", cpu: bool = False, world_size: int = 1
) -> tuple[int, int] | None:
    """(max_num_batched_tokens, max_num_seqs) vLLM 0.32 picks for ``vllm serve`` on this
    device; None when the device is unknown (the defaults differ 4-fold between GPUs)."""
    if cpu:
        return 2048 * world_size, 128 * world_size
    if device_memory_gib is None:
        return None
    if device_memory_gib >= 160:  # B200/B300
        return 16384, 1024
    if device_memory_gib >= 70 and "a100" not in device_name.lower():  # H100/H200
        return 8192, 1024
    return 2048, 256  # every other GPU, the A100 80GB among them


def _int_arg(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _float_arg(value: Any) -> float | None:
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


@dataclass(frozen=True)
class ServerLimits:
    """The limits a knee can be explained by; None where unknown. ``max_num_seqs`` and
    ``max_num_batched_tokens`` are per engine; ``engines`` is the data-parallel size (the
    ``running`` series sums the engines). ``sources`` says where each came from."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_concurrency: int | None = None  # rampwatch's --max-concurrency, a client-side cap
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    engines: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def running_cap(self) -> int | None:
        return None if self.max_num_seqs is None else self.max_num_seqs * self.engines

    @property
    def kv_tokens(self) -> int | None:
        if self.num_gpu_blocks is None or self.block_size is None:
            return None
        return self.num_gpu_blocks * self.block_size

    @classmethod
    def from_engine_args(
        cls,
        args: Mapping[str, Any],
        device_memory_gib: float | None = None,
        device_name: str = "",
        cpu: bool = False,
    ) -> ServerLimits:
        """From ``vllm serve``'s arguments (``{"max_num_seqs": "64", ...}``, dashes or
        underscores). An absent batch argument takes vLLM 0.32's default when the device
        is given (``vllm_batch_defaults``), else stays unknown (the explanation then infers
        the batch cap from a plateau). A value that is not a positive number is ignored."""
        a = {str(k).lstrip("-").replace("-", "_"): v for k, v in args.items()}
        sources: dict[str, str] = {}

        def given(name: str, parse: Callable[[Any], Any]) -> Any:
            value = parse(a.get(name)) if name in a else None
            if value is not None:
                sources[name] = "serve command"
            return value

        seqs = given("max_num_seqs", _int_arg)
        budget = given("max_num_batched_tokens", _int_arg)
        tp = _int_arg(a.get("tensor_parallel_size", a.get("tp"))) or 1
        pp = _int_arg(a.get("pipeline_parallel_size", a.get("pp"))) or 1
        defaults = vllm_batch_defaults(device_memory_gib, device_name, cpu, world_size=tp * pp)
        if defaults is not None:
            double = str(a.get("performance_mode", "")).strip() == "throughput"  # vLLM doubles both then
            if budget is None:
                budget = defaults[0] * (2 if double else 1)
                no_chunking = (
                    str(a.get("enable_chunked_prefill", "")).lower() == "false" or "no_enable_chunked_prefill" in a
                )
                max_len = _int_arg(a.get("max_model_len"))
                if no_chunking and max_len is not None:  # a whole prompt must fit one step
                    budget = max(budget, max_len)
                sources["max_num_batched_tokens"] = "vLLM default"
            if seqs is None:
                seqs = defaults[1] * (2 if double else 1)
                sources["max_num_seqs"] = "vLLM default"
        blocks = given("num_gpu_blocks_override", _int_arg)
        block_size = given("block_size", _int_arg)
        memory = given("gpu_memory_utilization", _float_arg)
        dtype = a.get("kv_cache_dtype")
        return cls(
            max_num_seqs=seqs,
            max_num_batched_tokens=budget,
            num_gpu_blocks=blocks,
            block_size=block_size,
            engines=_int_arg(a.get("data_parallel_size", a.get("dp"))) or 1,
            tensor_parallel_size=tp,
            gpu_memory_utilization=memory,
            kv_cache_dtype=str(dtype) if dtype else None,
            sources=sources,
        )

    @classmethod
    def from_cache_config(cls, labels: Mapping[str, Any]) -> ServerLimits:
        """From the labels of vLLM's ``vllm:cache_config_info`` (the run header's
        ``server_info["cache_config"]``): the KV cache's size, never the batch limits."""
        sources: dict[str, str] = {}
        values: dict[str, Any] = {}
        for name, label, parse in (
            ("num_gpu_blocks", "num_gpu_blocks", _int_arg),
            ("block_size", "block_size", _int_arg),
            ("gpu_memory_utilization", "gpu_memory_utilization", _float_arg),
        ):
            value = parse(labels.get(label))
            if value is not None:
                values[name] = value
                sources[name] = "/metrics cache_config_info"
        dtype = labels.get("cache_dtype")
        if isinstance(dtype, str) and dtype and dtype != "auto":
            values["kv_cache_dtype"] = dtype
        return cls(sources=sources, **values)

    @classmethod
    def of_run(cls, header: RunHeader | None, given: ServerLimits | None = None) -> ServerLimits:
        """What a run knows: ``given`` (the serve command's), then the server's cache
        config from the run header, then the run's --max-concurrency."""
        limits = given or cls()
        if header is not None:
            cache = header.server_info.get("cache_config") if isinstance(header.server_info, dict) else None
            if isinstance(cache, dict):
                limits = limits.merged(cls.from_cache_config(cache))
            cap = concurrency_cap(header)
            if limits.max_concurrency is None and cap is not None:
                sources = {**limits.sources, "max_concurrency": "run options"}
                limits = cls(**{**limits._fields(), "max_concurrency": cap, "sources": sources})
        return limits

    def _fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def merged(self, other: ServerLimits) -> ServerLimits:
        """These limits, with ``other``'s filling what these do not know."""
        out = self._fields()
        sources = dict(self.sources)
        for name, value in other._fields().items():
            if name in ("sources", "engines", "tensor_parallel_size"):
                continue
            if out[name] is None and value is not None:
                out[name] = value
                if name in other.sources:
                    sources[name] = other.sources[name]
        out["sources"] = sources
        return ServerLimits(**out)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self._fields().items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerLimits:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)
