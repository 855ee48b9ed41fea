import pytest

from rampwatch.core.errors import UserError
from rampwatch.sim.config import GIB, HARDWARE_PRESETS, MODEL_PRESETS, FaultConfig, SimConfig, derive_num_gpu_blocks


def test_required_presets_exist():
    assert {"h100", "h200", "a100-80g", "a100-40g", "l4", "instant"} <= set(HARDWARE_PRESETS)
    assert {"llama-3.1-8b", "llama-3.1-8b-fp8"} <= set(MODEL_PRESETS)


def test_llama_kv_bytes_per_token_matches_config():
    # 2 (K,V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 128 KiB per token
    assert MODEL_PRESETS["llama-3.1-8b"].kv_bytes_per_token == 131072


@pytest.mark.parametrize("hardware", ["h100", "h200", "a100-80g", "a100-40g", "l4"])
def test_derived_blocks_follow_the_memory_budget(hardware):
    hw, model = HARDWARE_PRESETS[hardware], MODEL_PRESETS["llama-3.1-8b"]
    blocks = derive_num_gpu_blocks(hw, model, 0.9, 16)
    budget = hw.hbm_gib * GIB * 0.9 - model.weight_bytes - model.runtime_reserve_gib * GIB
    assert blocks * 16 * model.kv_bytes_per_token <= budget < (blocks + 1) * 16 * model.kv_bytes_per_token


def test_fp8_weights_leave_more_room_for_kv():
    bf16 = SimConfig(hardware="l4", model="llama-3.1-8b").resolved()
    fp8 = SimConfig(hardware="l4", model="llama-3.1-8b-fp8").resolved()
    assert fp8.num_gpu_blocks > bf16.num_gpu_blocks > 0


def test_more_memory_utilization_more_blocks():
    low = SimConfig(gpu_memory_utilization=0.5).resolved().num_gpu_blocks
    high = SimConfig(gpu_memory_utilization=0.95).resolved().num_gpu_blocks
    assert high > low


def test_resolved_defaults():
    cfg = SimConfig(hardware="l4", model="llama-3.1-8b").resolved()
    assert cfg.served_model_name == "llama-3.1-8b"
    # the context length is capped by what the KV cache can hold
    assert cfg.max_model_len == min(131072, cfg.num_gpu_blocks * cfg.block_size)
    assert SimConfig(num_gpu_blocks=100, max_model_len=512).resolved().num_gpu_blocks == 100


@pytest.mark.parametrize(
    "kwargs, flag, listed",
    [
        ({"hardware": "h800"}, "--hardware", "a100-40g"),
        ({"model": "llama-70b"}, "--model", "llama-3.1-8b-fp8"),
        ({"routing": "random"}, "--routing", "round-robin"),
        ({"block_size": 0}, "--block-size", None),
        ({"speed": 0}, "--speed", None),
        ({"faults": FaultConfig(error_rate=1.5)}, "--error-rate", None),
    ],
)
def test_bad_values_name_the_flag(kwargs, flag, listed):
    with pytest.raises(UserError) as exc:
        SimConfig(**kwargs).resolved()
    assert flag in str(exc.value)
    if listed:
        assert listed in str(exc.value)


def test_model_that_does_not_fit_is_a_user_error():
    with pytest.raises(UserError, match="does not fit"):
        SimConfig(hardware="l4", model="llama-3.1-8b", gpu_memory_utilization=0.5).resolved()


def test_context_longer_than_kv_cache_is_refused():
    with pytest.raises(UserError, match="--max-model-len 4096"):
        SimConfig(num_gpu_blocks=100, block_size=16, max_model_len=4096).resolved()
