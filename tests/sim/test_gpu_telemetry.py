"""The simulator's DCGM-style GPU gauges (`rampwatch sim --gpu-telemetry`)."""

import aiohttp
import pytest

from rampwatch.loadgen.server.scrape import parse_dcgm
from rampwatch.sim.cli import config_to_argv
from rampwatch.sim.config import GIB, HARDWARE_PRESETS, SimConfig
from rampwatch.sim.gpu_telemetry import DCGM_PATH, GpuTelemetry
from rampwatch.sim.server import serve


def telemetry(hardware: str = "h100", engines: int = 1) -> GpuTelemetry:
    return GpuTelemetry(SimConfig(hardware=hardware, model="llama-3.1-8b", engines=engines).resolved(), engines)


@pytest.mark.parametrize(
    ("steps", "now", "util"),
    [
        ([], 5.0, 0.0),
        ([(4.0, 0.5)], 5.0, 0.5),  # busy 4.0-4.5 within (4, 5]
        ([(3.5, 1.0)], 5.0, 0.5),  # half of it before the window
        ([(4.0, 0.25), (4.5, 0.25)], 5.0, 0.5),
        ([(4.2, 0.3)], 4.35, 0.15),  # a step still running counts up to now
        ([(0.0, 0.5)], 5.0, 0.0),  # long ago
        ([(4.0, 2.0)], 5.0, 1.0),
    ],
)
def test_utilisation_is_the_busy_share_of_the_last_second(steps, now, util):
    t = telemetry()
    for start, duration in steps:
        t.on_step(0, start, duration)
    assert t.utilisation(0, now) == pytest.approx(util)


@pytest.mark.parametrize("hardware", ["h100", "a100-80g", "l4"])
def test_power_runs_from_idle_to_tdp_with_utilisation_and_the_clock_boosts_when_busy(hardware):
    hw = HARDWARE_PRESETS[hardware]
    t = telemetry(hardware)
    idle = t.gauges(0, 10.0)
    assert idle["DCGM_FI_DEV_POWER_USAGE"] == hw.idle_w and idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert idle["DCGM_FI_DEV_SM_CLOCK"] == hw.idle_sm_clock_mhz
    t.on_step(0, 9.0, 0.25)
    t.on_step(0, 9.5, 0.5)
    busy = t.gauges(0, 10.0)
    assert busy["DCGM_FI_DEV_GPU_UTIL"] == 75
    assert busy["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(hw.idle_w + 0.75 * (hw.tdp_w - hw.idle_w))
    assert busy["DCGM_FI_DEV_SM_CLOCK"] == hw.max_sm_clock_mhz
    assert hw.idle_w < hw.tdp_w and hw.idle_sm_clock_mhz < hw.max_sm_clock_mhz


def test_memory_used_is_weights_reserve_and_the_whole_kv_pool():
    config = SimConfig(hardware="h100", model="llama-3.1-8b").resolved()
    t = GpuTelemetry(config, 1)
    model = config.model_preset
    used = model.weight_bytes + model.runtime_reserve_gib * GIB + config.num_gpu_blocks * 16 * model.kv_bytes_per_token
    gauges = t.gauges(0, 0.0)
    assert gauges["DCGM_FI_DEV_FB_USED"] == round(used / 2**20)
    assert gauges["DCGM_FI_DEV_FB_USED"] + gauges["DCGM_FI_DEV_FB_FREE"] == pytest.approx(80 * 1024, abs=1)
    # vLLM sizes its pool to gpu_memory_utilization of the device
    assert gauges["DCGM_FI_DEV_FB_USED"] / (80 * 1024) == pytest.approx(0.9, abs=0.01)


def test_the_page_reads_back_one_gpu_per_engine():
    page = telemetry(engines=2).render(1.0).decode()
    sample = parse_dcgm(page, "sim", 1.0)
    assert sample.ok and list(sample.gpus) == ["0", "1"]
    assert set(sample.gpus["1"]) == {"util_pct", "mem_used_mib", "mem_free_mib", "power_w", "sm_clock_mhz"}
    assert "# TYPE DCGM_FI_DEV_POWER_USAGE gauge" in page and 'modelName="NVIDIA H100 SXM5 80GB (simulated)"' in page


def test_tensor_parallel_ranks_are_gpus_each_holding_its_share_and_busy_with_its_engine():
    config = SimConfig(hardware="h100", model="llama-3.1-8b", engines=2, tensor_parallel_size=2).resolved()
    t = GpuTelemetry(config, 2)
    t.on_step(1, 0.5, 0.5)
    sample = parse_dcgm(t.render(1.0).decode(), "sim", 1.0)
    assert list(sample.gpus) == ["0", "1", "2", "3"]  # engine 0 -> GPUs 0, 1; engine 1 -> GPUs 2, 3
    assert [sample.gpus[g]["util_pct"] for g in "0123"] == [0, 0, 50, 50]
    model = config.model_preset
    used = (
        model.weight_bytes / 2
        + model.runtime_reserve_gib * GIB
        + config.num_gpu_blocks * config.block_size * config.kv_bytes_per_token_per_gpu
    )
    assert sample.gpus["0"]["mem_used_mib"] == round(used / 2**20)


def test_the_embedded_simulator_gets_the_flag():
    assert "--gpu-telemetry" in config_to_argv(SimConfig(gpu_telemetry=True))
    assert "--gpu-telemetry" not in config_to_argv(SimConfig())


async def test_served_only_with_the_flag_and_metrics_stays_vllms():
    async with serve(SimConfig(hardware="instant", model="tiny"), port=0) as url:
        async with aiohttp.ClientSession() as s, s.get(url + DCGM_PATH) as r:
            assert r.status == 404
    async with serve(SimConfig(hardware="l4", model="tiny", gpu_telemetry=True), port=0) as url:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + DCGM_PATH) as r:
                assert r.status == 200
                sample = parse_dcgm(await r.text(), url, 0.0)
            async with s.get(url + "/metrics") as r:
                metrics = await r.text()
    assert sample.ok and sample.gpus["0"]["power_w"] == HARDWARE_PRESETS["l4"].idle_w  # no load: idle
    assert "DCGM_" not in metrics and "vllm:num_requests_running" in metrics
