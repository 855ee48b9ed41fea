"""The HTTP surface, driven with an aiohttp client against an in-loop server."""

import asyncio
import json
import time

import aiohttp
import pytest

from rampwatch.core.tokenizer import SimTokenizer, count_chat_tokens
from rampwatch.sim.config import FaultConfig, SimConfig
from rampwatch.sim.server import SimServer, run_server, serve

FAST = dict(hardware="instant", model="tiny", seed=7)


def events(body: str) -> list[str]:
    return [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]


def key_shape(obj):
    """Keys in order, recursively: the field layout of a chunk, whatever the values."""
    if isinstance(obj, dict):
        return [(k, key_shape(v)) for k, v in obj.items()]
    if isinstance(obj, list):
        return [key_shape(v) for v in obj[:1]]
    return None


async def until(condition, timeout_s: float = 30.0) -> None:
    """Until ``condition()`` holds (the server's own tasks: polled; the bound is for a
    loaded machine, a passing test waits only as long as the server takes)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def post(url, path, payload, raw=None):
    async with aiohttp.ClientSession() as s:
        async with s.post(url + path, json=payload if raw is None else None, data=raw) as r:
            return r.status, await r.text()


async def test_port_zero_reports_real_port():
    async with serve(SimConfig(**FAST), port=0) as url:
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0")
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/health") as r:
                assert r.status == 200
            async with s.get(url + "/v1/models") as r:
                data = await r.json()
                assert data["data"][0]["id"] == "tiny" and data["data"][0]["max_model_len"] == 2048
            async with s.get(url + "/version") as r:
                assert (await r.json())["version"].startswith("0.32.0")


async def test_completion_stream_has_vllm_chunk_layout(vllm_captures):
    real = events((vllm_captures / "completions-stream.txt").read_text())
    async with serve(SimConfig(**FAST)) as url:
        status, body = await post(
            url,
            "/v1/completions",
            {
                "model": "tiny",
                "prompt": "one two three four",
                "max_tokens": 8,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            },
        )
    assert status == 200
    ours = events(body)
    assert ours[-1] == "[DONE]" and real[-1] == "[DONE]"
    assert len(ours) == len(real) == 10
    for mine, theirs in zip(ours[:-1], real[:-1]):
        assert key_shape(json.loads(mine)) == key_shape(json.loads(theirs))
    chunks = [json.loads(e) for e in ours[:-1]]
    assert chunks[0]["id"].startswith("cmpl-") and len({c["id"] for c in chunks}) == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * 7 + ["length"]
    assert chunks[-1]["usage"] == {"prompt_tokens": 4, "total_tokens": 12, "completion_tokens": 8}
    assert chunks[-1]["system_fingerprint"].startswith("vllm-0.32.0")
    text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
    assert SimTokenizer().count(text) == 8


async def test_chat_stream_has_vllm_chunk_layout(vllm_captures):
    real = events((vllm_captures / "chat-stream.txt").read_text())
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    async with serve(SimConfig(**FAST)) as url:
        status, body = await post(
            url,
            "/v1/chat/completions",
            {
                "model": "tiny",
                "messages": messages,
                "max_completion_tokens": 4,
                "stream": True,
                "stream_options": {"include_usage": True},
                "ignore_eos": True,
            },
        )
    assert status == 200
    ours = [json.loads(e) for e in events(body)[:-1]]
    theirs = [json.loads(e) for e in real[:-1]]
    assert key_shape(ours[0]) == key_shape(theirs[0])  # role-only first chunk
    assert ours[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert key_shape(ours[1]) == key_shape(theirs[1])
    assert key_shape(ours[-2]) == key_shape(theirs[-2])  # last token chunk carries finish_reason
    assert key_shape(ours[-1]) == key_shape(theirs[-1])
    assert ours[-2]["choices"][0]["finish_reason"] == "length"
    assert ours[0]["id"].startswith("chatcmpl-")
    assert ours[-1]["usage"]["prompt_tokens"] == count_chat_tokens(SimTokenizer(), messages) == (2 + 3) + (2 + 3) + 2
    assert ours[-1]["usage"]["completion_tokens"] == 4 == len(ours) - 2


async def test_non_streaming_is_deterministic_and_counts_tokens():
    tok = SimTokenizer()
    payload = {"prompt": "alpha beta gamma", "max_tokens": 12, "ignore_eos": True}
    async with serve(SimConfig(**FAST)) as url:
        _, a = await post(url, "/v1/completions", payload)
        _, b = await post(url, "/v1/completions", payload)
        _, ids = await post(
            url, "/v1/completions", {"prompt": tok.encode("alpha beta gamma"), "max_tokens": 12, "ignore_eos": True}
        )
        _, chat = await post(
            url,
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x y"}], "max_tokens": 3, "ignore_eos": True},
        )
    a, b, ids, chat = json.loads(a), json.loads(b), json.loads(ids), json.loads(chat)
    assert a["choices"][0]["text"] == b["choices"][0]["text"] == ids["choices"][0]["text"]
    assert tok.count(a["choices"][0]["text"]) == 12
    assert a["usage"] == {
        "prompt_tokens": 3,
        "total_tokens": 15,
        "completion_tokens": 12,
        "prompt_tokens_details": None,
    }
    assert chat["object"] == "chat.completion" and chat["usage"]["prompt_tokens"] == 2 + 3 + 2
    assert chat["choices"][0]["message"]["role"] == "assistant"


async def test_continuous_usage_stats():
    async with serve(SimConfig(**FAST)) as url:
        _, body = await post(
            url,
            "/v1/completions",
            {
                "prompt": "a b",
                "max_tokens": 3,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
    chunks = [json.loads(e) for e in events(body)[:-1]]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 3]


async def test_error_bodies(vllm_captures):
    expected = json.loads((vllm_captures / "error-too-long.json").read_text())
    async with serve(SimConfig(**FAST)) as url:  # tiny: max_model_len 2048, like the capture
        status, body = await post(url, "/v1/completions", {"model": "tiny", "prompt": "a b c d", "max_tokens": 5000})
        assert status == 400 and json.loads(body) == expected
        status, body = await post(url, "/v1/completions", {"prompt": "a " * 2000, "max_tokens": 100})
        err = json.loads(body)["error"]
        assert status == 400 and err["type"] == "BadRequestError" and "maximum context length is 2048" in err["message"]
        status, body = await post(url, "/v1/completions", {"model": "nope", "prompt": "a"})
        assert status == 404 and json.loads(body)["error"]["type"] == "NotFoundError"
        assert json.loads(body)["error"]["code"] == 404
        status, body = await post(url, "/v1/completions", None, raw=b"{not json")
        assert status == 400 and json.loads(body)["error"]["code"] == 400
        status, body = await post(url, "/v1/completions", {"prompt": "", "max_tokens": 3})
        assert status == 400


async def get_metrics(url) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(url + "/metrics") as r:
            assert r.status == 200
            return await r.text()


def sample(text: str, prefix: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


async def test_metrics_count_requests():
    async with serve(SimConfig(**FAST)) as url:
        for _ in range(3):
            await post(url, "/v1/completions", {"prompt": "p q r s", "max_tokens": 5, "ignore_eos": True})
        text = await get_metrics(url)
    assert sample(text, 'vllm:request_success_total{engine="0",finished_reason="length"') == 3
    assert sample(text, "vllm:generation_tokens_total") == 15
    assert sample(text, "vllm:prompt_tokens_total") == 12
    assert sample(text, "vllm:time_to_first_token_seconds_count") == 3


async def test_fault_error_rate_and_metrics_failures():
    faults = FaultConfig(error_rate=1.0, metrics_error_rate=1.0)
    async with serve(SimConfig(**FAST, faults=faults)) as url:
        status, body = await post(url, "/v1/completions", {"prompt": "a", "max_tokens": 2})
        assert status == 500 and json.loads(body)["error"]["code"] == 500
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/metrics") as r:
                assert r.status == 500


async def test_fault_error_rate_is_seeded():
    async def outcomes():
        async with serve(SimConfig(**FAST, faults=FaultConfig(error_rate=0.5))) as url:
            return [(await post(url, "/v1/completions", {"prompt": "a", "max_tokens": 1}))[0] for _ in range(12)]

    first = await outcomes()
    assert first == await outcomes()
    assert {200, 500} == set(first)


async def test_fault_mid_stream_abort():
    server = SimServer(SimConfig(**FAST, faults=FaultConfig(abort_rate=1.0)))
    async with run_server(server) as url:
        async with aiohttp.ClientSession() as s:
            async with s.post(
                url + "/v1/completions", json={"prompt": "a", "max_tokens": 50, "stream": True, "ignore_eos": True}
            ) as r:
                with pytest.raises(aiohttp.ClientPayloadError):
                    await r.read()
        await asyncio.sleep(0.05)
        assert not server.engines[0].has_work()
        assert server.engines[0].pool.usage() == 0.0


async def test_client_disconnect_aborts_request():
    server = SimServer(SimConfig(hardware="h100", model="tiny"))
    async with run_server(server) as url:
        async with aiohttp.ClientSession() as s:
            async with s.post(
                url + "/v1/completions", json={"prompt": "a", "max_tokens": 1000, "stream": True, "ignore_eos": True}
            ) as r:
                await r.content.readline()
        await until(lambda: server.engines[0].stats.finished["abort"])
        assert server.engines[0].stats.finished["abort"] == 1
        assert not server.engines[0].has_work()


async def test_client_disconnect_aborts_request_even_when_no_token_comes():
    # The stalled engine never hands the handler another token, so a failed write cannot
    # be what notices the disconnect: the disconnect itself must end the request.
    server = SimServer(SimConfig(**FAST, faults=FaultConfig(stall_at=0.0, stall_for=3600)))
    async with run_server(server) as url:
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 10, "stream": True}) as r:
                assert r.status == 200
        await until(lambda: server.engines[0].stats.finished["abort"])
        assert server.engines[0].stats.finished["abort"] == 1
        assert not server.engines[0].has_work()


async def test_stall_delays_tokens():
    server = SimServer(SimConfig(**FAST, faults=FaultConfig(stall_at=0.0, stall_for=0.3)))
    async with run_server(server) as url:
        t0 = time.monotonic()
        status, _ = await post(url, "/v1/completions", {"prompt": "a", "max_tokens": 2})
        assert status == 200
        assert time.monotonic() - t0 >= 0.25
    assert server.engines[0].stats.ttft.total >= 0.25


async def test_real_time_pacing_follows_roofline_and_speed():
    cfg = SimConfig(hardware="h100", model="llama-3.1-8b", speed=4.0)
    server = SimServer(cfg)
    async with run_server(server) as url:
        t0 = time.monotonic()
        await post(url, "/v1/completions", {"prompt": "a b c", "max_tokens": 40, "ignore_eos": True})
        wall = time.monotonic() - t0
    simulated = server.engines[0].stats.e2e.total
    assert simulated > 40 * 0.005  # ~7 ms per decode step on an H100
    assert wall >= simulated / 4.0 * 0.9


async def test_data_parallel_engines_have_their_own_series():
    server = SimServer(SimConfig(hardware="h100", model="tiny", engines=2))
    async with run_server(server) as url:
        await asyncio.gather(
            *[post(url, "/v1/completions", {"prompt": f"x{i}", "max_tokens": 20, "ignore_eos": True}) for i in range(6)]
        )
        text = await get_metrics(url)
    per_engine = [e.stats.finished["length"] for e in server.engines]
    assert per_engine == [3, 3]  # least-loaded spreads simultaneous arrivals evenly
    assert sample(text, 'vllm:request_success_total{engine="1",finished_reason="length"') == 3
    assert "vllm:cache_config_info{" in text and 'engine="1"' in text


async def test_round_robin_routing():
    server = SimServer(SimConfig(**FAST, engines=3, routing="round-robin"))
    async with run_server(server) as url:
        for _ in range(6):
            await post(url, "/v1/completions", {"prompt": "a", "max_tokens": 1})
    assert [e.stats.finished["length"] for e in server.engines] == [2, 2, 2]


@pytest.mark.parametrize("salt", ["", 7, "a/b", "x" * 129])
async def test_a_bad_cache_salt_is_refused_as_vllm_refuses_it(salt):
    async with serve(SimConfig(**FAST)) as url:
        status, body = await post(url, "/v1/completions", {"prompt": "a b c", "max_tokens": 2, "cache_salt": salt})
    err = json.loads(body)["error"]
    assert status == 400 and err["type"] == "BadRequestError" and "'cache_salt' must" in err["message"]
    assert err["param"] == "cache_salt"


async def test_a_valid_cache_salt_is_served():
    async with serve(SimConfig(**FAST)) as url:
        status, body = await post(url, "/v1/completions", {"prompt": "a b c", "max_tokens": 2, "cache_salt": "run-1"})
    assert status == 200, body
