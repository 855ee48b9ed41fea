"""vLLM's cache_salt, as rampwatch's runs use it: the real CPU vLLM shares prefix-cache
blocks only between requests of the same salt (none being a salt of its own), and the
simulator does the same."""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request

import pytest

from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# (salt, whether the request finds the same prompt's blocks in the cache)
SEQUENCE = [("run-a", False), ("run-b", False), ("run-a", True), (None, False), (None, True), ("run-b", True)]


def cached_tokens(url: str, prompt: str, salt: str | None) -> int:
    body: dict = {"model": "tiny", "prompt": prompt, "max_tokens": 1}
    if salt is not None:
        body["cache_salt"] = salt
    request = urllib.request.Request(
        url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        usage = json.load(answer)["usage"]
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


def hits(url: str) -> list[bool]:
    rng = random.Random()  # a prompt no earlier test sent: the unsalted requests start cold
    prompt = " ".join(str(rng.randrange(10**6)) for _ in range(300))
    return [cached_tokens(url, prompt, salt) > 0 for salt, _ in SEQUENCE]


def test_only_requests_with_the_same_salt_share_cached_blocks_in_vllm(vllm_server):
    assert hits(vllm_server.url) == [hit for _, hit in SEQUENCE]


async def test_the_simulator_shares_them_as_vllm_does():
    async with serve(SimConfig(hardware="instant", model="tiny", enable_prompt_tokens_details=True)) as url:
        got = await asyncio.to_thread(hits, url)
    assert got == [hit for _, hit in SEQUENCE]
