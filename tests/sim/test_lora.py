"""The simulator's LoRA adapters (sim.lora): at most --max-loras adapters in a batch, a
request whose adapter has no slot skipped (not blocking those behind it), loads from CPU
or disk charged to the step, the flags, /v1/models and vLLM's error, the info gauge."""

import json

import aiohttp
import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.server.scrape import parse_metrics
from rampwatch.sim.cli import config_to_argv
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import Engine, SimRequest
from rampwatch.sim.lora import LoraConfig, LoraInfo, LoraModule, LoraSlots, parse_lora_modules
from rampwatch.sim.serve_flags import vllm_serve_argv
from rampwatch.sim.server import serve

MODULES = (LoraModule("sql", "/lora/sql"), LoraModule("chat", "/lora/chat"), LoraModule("code", "/lora/code"))


def lora(**kwargs) -> LoraConfig:
    return LoraConfig(enable_lora=True, modules=MODULES, **kwargs)


def engine(**kwargs) -> Engine:
    return Engine(SimConfig(hardware="h100", model="llama-3.1-8b", seed=1, lora=lora(**kwargs)).resolved())


def prompt(n: int, salt: int) -> list[int]:
    return [(salt * 7919 + i) % 30000 + 10 for i in range(n)]


def test_a_batch_holds_at_most_max_loras_adapters_and_skipped_requests_do_not_block():
    e = engine(max_loras=2)
    adapters = ["sql", "chat", "code", None, "sql"]
    for i, name in enumerate(adapters):
        e.add_request(SimRequest(f"r{i}", prompt(32, i), max_tokens=50, lora=name), now=0.0)
    e.step(0.0)
    assert [r.lora for r in e.running] == ["sql", "chat", None, "sql"]  # code skipped, those behind it admitted
    assert [r.request_id for r in e.waiting] == ["r2"]  # still at the head of the queue
    t = 0.0
    while e.has_work():
        assert len({r.lora for r in e.running if r.lora is not None}) <= 2
        t += e.step(t).duration
    assert e.lora is not None and e.lora.loads_from_disk == 3


def test_an_adapter_in_a_slot_or_the_cpu_cache_loads_faster():
    slots = LoraSlots(lora(max_loras=1, max_cpu_loras=2))
    slots.begin_step([])
    slots.take("sql")
    assert slots.step_time(0.0, False) == pytest.approx(0.030)  # from disk, rank 16
    slots.begin_step([])
    slots.take("chat")  # "sql" leaves the GPU slot, stays in CPU memory
    slots.begin_step([])
    slots.take("sql")
    assert slots.step_time(0.0, False) == pytest.approx(0.002)  # from CPU memory
    slots.begin_step(["sql"])
    slots.take("sql")
    assert slots.step_time(0.0, False) == 0.0  # resident
    assert (slots.loads_from_disk, slots.loads_from_cpu) == (2, 1)
    assert list(slots.gpu) == ["sql"]


def test_rank_raises_the_step_a_little():
    low, high = LoraSlots(lora(max_lora_rank=8)), LoraSlots(lora(max_lora_rank=64))
    for slots in (low, high):
        slots.begin_step(["sql"])
    assert 0 < low.step_time(0.010, True) < high.step_time(0.010, True) < 0.010 * 0.05
    assert low.step_time(0.010, False) == 0.0  # no LoRA request in the step


def test_lora_steps_take_longer_than_base_model_steps():
    def drain(name):
        e = engine(max_loras=1)
        for i in range(8):
            e.add_request(SimRequest(f"r{i}", prompt(64, i), max_tokens=20, lora=name), now=0.0)
        t = 0.0
        while e.has_work():
            t += e.step(t).duration
        return t

    assert drain("sql") > drain(None)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (LoraConfig(modules=MODULES), "--lora-modules needs --enable-lora"),
        (lora(max_loras=0), "--max-loras 0: must be >= 1"),
        (lora(max_lora_rank=12), "--max-lora-rank 12: valid values: 1, 8, 16"),
        (lora(max_loras=4, max_cpu_loras=2), "--max-cpu-loras 2: must be >= --max-loras 4"),
        (
            LoraConfig(enable_lora=True, modules=(MODULES[0], MODULES[0])),
            "--lora-modules: an adapter name is given twice",
        ),
    ],
)
def test_bad_lora_flags_are_one_line(config, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")):
        SimConfig(hardware="h100", model="tiny", lora=config).resolved()


def test_lora_modules_read_as_vllm_reads_them_and_the_flags_round_trip():
    modules = parse_lora_modules(["sql=/a", json.dumps({"name": "chat", "path": "/b", "base_model_name": "base"})])
    assert modules == (LoraModule("sql", "/a"), LoraModule("chat", "/b", "base"))
    with pytest.raises(UserError, match="--lora-modules 'nope'"):
        parse_lora_modules(["nope"])
    config = SimConfig(hardware="h100", model="tiny", lora=lora(max_loras=2, max_cpu_loras=3))
    argv = config_to_argv(config)
    tail = argv[argv.index("--enable-lora") :]
    assert tail == ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "16", "--max-cpu-loras", "3"] + [
        "--lora-modules",
        "sql=/lora/sql",
        "chat=/lora/chat",
        "code=/lora/code",
    ]
    serve_line = vllm_serve_argv(["rampwatch", "sim", *argv], "m")
    assert serve_line[serve_line.index("--enable-lora") :] == tail


def test_the_info_gauge_keeps_each_state_at_its_time():
    info = LoraInfo(max_loras=2)
    info.update(["sql"], [], 10.0)
    info.update(["sql", "chat"], ["code"], 11.0)
    info.update(["sql"], [], 12.0)
    assert info.samples() == [
        ({"max_lora": "2", "running_lora_adapters": "sql,chat", "waiting_lora_adapters": "code"}, 11.0),
        ({"max_lora": "2", "running_lora_adapters": "sql", "waiting_lora_adapters": ""}, 12.0),
    ]


@pytest.mark.slow
async def test_the_server_lists_its_adapters_runs_them_and_refuses_others():
    config = SimConfig(hardware="instant", model="tiny", lora=lora(max_loras=2))
    async with serve(config) as url, aiohttp.ClientSession() as session:
        async with session.get(url + "/v1/models") as resp:
            cards = (await resp.json())["data"]
        assert [c["id"] for c in cards] == ["tiny", "sql", "chat", "code"]
        assert cards[1] | {"created": 0} == {
            "id": "sql",
            "object": "model",
            "created": 0,
            "owned_by": "vllm",
            "root": "/lora/sql",
            "parent": "tiny",
            "max_model_len": None,
            "permission": [],
        }
        body = {"model": "chat", "prompt": "hello there", "max_tokens": 3, "ignore_eos": True}
        async with session.post(url + "/v1/completions", json=body) as resp:
            assert resp.status == 200 and (await resp.json())["model"] == "chat"
        async with session.post(url + "/v1/completions", json={**body, "model": "nope"}) as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["message"] == "The model `nope` does not exist."
        async with session.get(url + "/metrics") as resp:
            sample = parse_metrics(await resp.text(), url, 0.0)
        assert (sample.lora_running, sample.lora_waiting, sample.max_lora) == ([], [], 2.0)
