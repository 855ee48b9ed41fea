"""Multi-turn conversations over HTTP, and vLLM's usage.prompt_tokens_details.

A session's next turn carries the previous answer's streamed text; its prompt must
re-encode to the previous prompt followed by the generated ids so that it hits the
answer's cached blocks, in both the chat and the completions layout.
"""

import json

import aiohttp
import pytest

from rampwatch.loadgen.workload.prompts import SEPARATOR
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve
from tests.sim.test_server import events, key_shape

BS = 16
DETAILS = dict(hardware="instant", model="tiny", seed=3, block_size=BS, enable_prompt_tokens_details=True)


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{start + i}" for i in range(n))


async def stream(session: aiohttp.ClientSession, url: str, chat: bool, body: dict) -> tuple[str, dict]:
    """The streamed answer's text and the final usage chunk's usage."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    payload = {"model": "tiny", "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}, **body}
    async with session.post(url + path, json=payload) as resp:
        assert resp.status == 200
        chunks = [json.loads(e) for e in events(await resp.text())[:-1]]
    pieces = [c["choices"][0]["delta"].get("content", "") if chat else c["choices"][0]["text"] for c in chunks[:-1]]
    return "".join(pieces), chunks[-1]["usage"]


async def test_chat_next_turn_hits_the_streamed_answer():
    system, user1, user2 = words(30), words(5, 100), words(5, 200)
    async with serve(SimConfig(**DETAILS)) as url, aiohttp.ClientSession() as session:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user1}]
        answer, first = await stream(session, url, True, {"messages": messages, "max_tokens": 20})
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": user2}]
        _, second = await stream(session, url, True, {"messages": messages, "max_tokens": 4})
    assert first["prompt_tokens"] == 33 + 8 + 2
    assert first["prompt_tokens_details"] == {"cached_tokens": 0, "created_cache_tokens": 32}
    assert second["prompt_tokens"] == 33 + 8 + 23 + 8 + 2
    # 43 prompt + 20 answer tokens, of which 62 computed: 3 full blocks. The prompt alone has 2.
    assert second["prompt_tokens_details"] == {"cached_tokens": 48, "created_cache_tokens": 16}


async def test_completions_next_turn_hits_the_streamed_answer():
    prompt1 = words(40)
    async with serve(SimConfig(**DETAILS)) as url, aiohttp.ClientSession() as session:
        answer, first = await stream(session, url, False, {"prompt": prompt1, "max_tokens": 20})
        prompt2 = prompt1 + answer + SEPARATOR + words(10, 300)
        _, second = await stream(session, url, False, {"prompt": prompt2, "max_tokens": 4})
    assert answer.startswith(" ")  # it continues the prompt's text
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    assert second["prompt_tokens"] == 70
    assert second["prompt_tokens_details"] == {"cached_tokens": 48}


@pytest.mark.parametrize(
    ("chat", "capture"),
    [(True, "chat-stream-cached.txt"), (False, "completions-stream-cached.txt")],
)
async def test_streamed_usage_has_vllms_prompt_tokens_details(vllm_captures, chat, capture):
    theirs = json.loads(events((vllm_captures / capture).read_text())[-2])
    body = {"messages": [{"role": "user", "content": words(40)}]} if chat else {"prompt": words(40)}
    async with serve(SimConfig(**DETAILS)) as url, aiohttp.ClientSession() as session:
        await stream(session, url, chat, {**body, "max_tokens": 2})
        _, usage = await stream(session, url, chat, {**body, "max_tokens": 2})
    assert key_shape(usage) == key_shape(theirs["usage"])
    assert usage["prompt_tokens_details"]["cached_tokens"] == 32


@pytest.mark.parametrize(("chat", "capture"), [(True, "chat-cached.json"), (False, "completions-cached.json")])
async def test_whole_answer_usage_has_vllms_prompt_tokens_details(vllm_captures, chat, capture):
    theirs = json.loads((vllm_captures / capture).read_text())["usage"]["prompt_tokens_details"]
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {"messages": [{"role": "user", "content": words(40)}]} if chat else {"prompt": words(40)}
    async with serve(SimConfig(**DETAILS)) as url, aiohttp.ClientSession() as session:
        details = []
        for _ in range(2):
            async with session.post(url + path, json={**body, "max_tokens": 2, "ignore_eos": True}) as resp:
                details.append((await resp.json())["usage"]["prompt_tokens_details"])
    assert key_shape(details[1]) == key_shape(theirs)
    assert [d["created_cache_tokens"] for d in details] == ([32, 0] if chat else [None, None])
    assert [d["cached_tokens"] for d in details] == [0, 32]
    assert theirs["multimodal_tokens"] is None is details[1]["multimodal_tokens"]


async def test_without_prefix_caching_nothing_is_cached_or_created():
    config = SimConfig(**{**DETAILS, "enable_prefix_caching": False})
    body = {"messages": [{"role": "user", "content": words(40)}], "max_tokens": 2}
    async with serve(config) as url, aiohttp.ClientSession() as session:
        await stream(session, url, True, body)
        _, usage = await stream(session, url, True, body)
    assert usage["prompt_tokens_details"] == {"cached_tokens": 0, "created_cache_tokens": 0}
