"""Tensor parallelism, FP8 weights, FP8 KV cache and chunked prefill: their effect on the KV
cache size and on step times, against the roofline's own arithmetic."""

import pytest

from rampwatch.core.errors import UserError
from rampwatch.sim.config import GIB, HARDWARE_PRESETS, MODEL_PRESETS, SimConfig, derive_num_gpu_blocks
from rampwatch.sim.engine import Engine, SimRequest

LLAMA = MODEL_PRESETS["llama-3.1-8b"]


def engine(**kwargs) -> Engine:
    base = dict(hardware="h100", model="llama-3.1-8b", num_gpu_blocks=20000, max_model_len=8192)
    base.update(kwargs)
    return Engine(SimConfig(**base).resolved())


def prompt(n: int, salt: int = 0) -> list[int]:
    return [(salt * 7919 + i) % 30000 + 10 for i in range(n)]


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tp_splits_weights_and_kv_across_gpus(tp):
    hw = HARDWARE_PRESETS["h100"]
    blocks = derive_num_gpu_blocks(hw, LLAMA, 0.9, 16, tensor_parallel_size=tp)
    per_gpu_budget = hw.hbm_gib * GIB * 0.9 - LLAMA.weight_bytes / tp - LLAMA.runtime_reserve_gib * GIB
    per_block = LLAMA.kv_bytes_per_token * 16 / tp  # 8 KV heads split over tp <= 8 GPUs
    assert blocks == int(per_gpu_budget // per_block)
    if tp > 1:
        # more than tp times the single GPU's KV: each GPU also freed (tp-1)/tp of the weights
        assert blocks > tp * derive_num_gpu_blocks(hw, LLAMA, 0.9, 16)


def test_kv_heads_are_replicated_beyond_their_count():
    # Llama-3.1-8B has 8 KV heads: at TP 16 each GPU still holds one whole head
    assert LLAMA.kv_bytes_per_token_as(2, 16) == LLAMA.kv_bytes_per_token_as(2, 8) == LLAMA.kv_bytes_per_token / 8


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_divides_work_and_adds_allreduce(tp):
    one, many = engine(), engine(tensor_parallel_size=tp)
    c1 = one.step_cost(256, 256 * 1000.0, 256 * 1000, 256)
    ct = many.step_cost(256, 256 * 1000.0, 256 * 1000, 256)
    assert ct.compute == pytest.approx(c1.compute / tp)
    assert ct.memory == pytest.approx(c1.memory / tp)
    hw, m = many.hardware, many.model
    hops = 2 * (tp - 1)
    per_call = hops * hw.allreduce_hop_latency_s + 2 * (tp - 1) / tp * 256 * m.hidden_size * 2 / hw.link_bandwidth
    assert ct.allreduce == pytest.approx(2 * m.num_layers * per_call)
    assert c1.allreduce == 0.0
    assert ct.host == c1.host  # one scheduler drives the whole group: the host cost does not shrink
    assert ct.total < c1.total


def test_tp_all_reduce_grows_with_tokens_in_the_step():
    e = engine(tensor_parallel_size=4)
    small, large = e.step_cost(16, 16.0, 16, 16), e.step_cost(8192, 8192.0, 8192, 16)
    assert large.allreduce > small.allreduce > 0


def test_tp_must_divide_attention_heads():
    with pytest.raises(UserError, match="--tensor-parallel-size 3"):
        SimConfig(tensor_parallel_size=3).resolved()


def test_fp8_kv_cache_holds_twice_the_tokens_and_halves_kv_reads():
    auto = SimConfig(hardware="h100").resolved()
    fp8 = SimConfig(hardware="h100", kv_cache_dtype="fp8").resolved()
    assert fp8.num_gpu_blocks == pytest.approx(2 * auto.num_gpu_blocks, abs=1)
    a = engine().step_cost(1, 0.0, 100_000, 1)
    f = engine(kv_cache_dtype="fp8").step_cost(1, 0.0, 100_000, 1)
    weights = LLAMA.weight_bytes / (HARDWARE_PRESETS["h100"].hbm_bandwidth * HARDWARE_PRESETS["h100"].memory_efficiency)
    assert f.memory - weights == pytest.approx((a.memory - weights) / 2)


@pytest.mark.parametrize("hardware, speedup", [("h100", 2.0), ("h200", 2.0), ("l4", 2.0), ("a100-80g", 1.0)])
def test_fp8_weights_compute_faster_only_where_tensor_cores_have_fp8(hardware, speedup):
    bf16 = engine(hardware=hardware)
    fp8 = engine(hardware=hardware, model="llama-3.1-8b-fp8")
    # a large prefill without context: linear layers only, compute-bound
    ratio = bf16.step_cost(8192, 0.0, 0, 1).compute / fp8.step_cost(8192, 0.0, 0, 1).compute
    assert ratio == pytest.approx(speedup, rel=0.01)  # the datasheets' dense FP8 over dense bf16
    # and everywhere the weights read in half the time
    assert fp8.step_cost(1, 0.0, 0, 1).memory == pytest.approx(bf16.step_cost(1, 0.0, 0, 1).memory / 2)


def test_without_chunked_prefill_a_prompt_waits_for_a_step_with_room():
    e = engine(enable_chunked_prefill=False, max_num_batched_tokens=8192)
    e.add_request(SimRequest("a", prompt(6000, 1), max_tokens=5), now=0.0)
    e.add_request(SimRequest("b", prompt(6000, 2), max_tokens=5), now=0.0)
    first = e.step(0.0)
    assert first.num_scheduled_tokens == 6000  # b does not fit the 2192 left: not split, waits
    assert e.num_running == 1 and e.num_waiting == 1
    second = e.step(first.duration)
    assert second.num_scheduled_tokens == 1 + 6000


def test_with_chunked_prefill_the_same_prompts_share_the_budget():
    e = engine(max_num_batched_tokens=8192)
    e.add_request(SimRequest("a", prompt(6000, 1), max_tokens=5), now=0.0)
    e.add_request(SimRequest("b", prompt(6000, 2), max_tokens=5), now=0.0)
    assert e.step(0.0).num_scheduled_tokens == 8192


def test_without_chunked_prefill_the_default_budget_covers_the_context():
    cfg = SimConfig(hardware="h100", max_model_len=32768, enable_chunked_prefill=False).resolved()
    assert cfg.max_num_batched_tokens == 32768
    assert SimConfig(hardware="h100", max_model_len=32768).resolved().max_num_batched_tokens == 8192
    with pytest.raises(UserError, match="--max-num-batched-tokens 4096"):
        SimConfig(max_model_len=32768, enable_chunked_prefill=False, max_num_batched_tokens=4096).resolved()


def test_per_request_host_cost_grows_with_the_batch():
    e = engine()
    assert e.step_cost(256, 0.0, 0, 256).host - e.step_cost(1, 0.0, 0, 1).host == pytest.approx(
        255 * e.hardware.per_request_overhead_s
    )
    custom = engine(step_overhead_s=0.002, per_request_overhead_s=1e-4)
    assert custom.step_cost(10, 0.0, 0, 10).host == pytest.approx(0.002 + 10 * 1e-4)
