"""Multi-turn sessions: the simulator's prefix-cache hit rate by turn follows the real vLLM's.

The same seeded workload of conversations (a shared system prompt, then user turns, each
next turn carrying the previous answer's streamed text, messages laid out as rampwatch
sends them: system, user, assistant, user…) runs against the real CPU vLLM and against
the simulator started with the real server's KV block size. Both are measured as
rampwatch measures them: usage.prompt_tokens_details.cached_tokens over prompt_tokens,
summed per turn index.

The workload is the same *in tokens*: each server gets text that its own tokenizer
counts to the same lengths (the real tiny model's prompts are made of words that are one
token each, and the simulator's user turns are sized so that every prompt has as many
tokens as the real one, the shared prefix included). What differs is only the cache.

The tiny model has random weights: left free it emits byte fragments and control
characters whose text does not re-encode to the ids it generated, so the next turn
would miss the answer's blocks for a reason that has nothing to do with caching (the
simulator's answers always round-trip; docs/sim-presets.md). The real answers are
therefore drawn from the same one-token words (``allowed_token_ids``), whose text
re-encodes exactly, and the test checks that it does.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from rampwatch.core.tokenizer import SimTokenizer, count_chat_tokens
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SESSIONS = 8
TURNS = 4
SYSTEM_WORDS = 180
USER_WORDS = (16, 96)
ANSWER_TOKENS = (48, 160)
TOLERANCE_POINTS = 5.0
# Sessions in flight together: their first turns share the system prompt's blocks while
# both are being computed (vLLM caches a block when it schedules it); few enough that
# nothing is evicted.
CONCURRENT = 2


@dataclass(frozen=True)
class Plan:
    """One seeded workload, in tokens."""

    system: list[int]  # indices into a server's word list
    users: list[list[list[int]]]  # [session][turn] -> word indices
    answers: list[list[int]]  # [session][turn] -> max_tokens (ignore_eos: exactly that many)


def make_plan(seed: int, n_words: int) -> Plan:
    rng = random.Random(seed)
    system = [rng.randrange(n_words) for _ in range(SYSTEM_WORDS)]
    users = [
        [[rng.randrange(n_words) for _ in range(rng.randint(*USER_WORDS))] for _ in range(TURNS)]
        for _ in range(SESSIONS)
    ]
    answers = [[rng.randint(*ANSWER_TOKENS) for _ in range(TURNS)] for _ in range(SESSIONS)]
    return Plan(system, users, answers)


@dataclass
class TurnResult:
    prompt_tokens: int
    cached_tokens: int


async def chat_turn(
    session: aiohttp.ClientSession, url: str, messages: list[dict], max_tokens: int, extra: dict
) -> tuple[str, dict]:
    """One streamed chat request: the answer's text as streamed, and the final usage."""
    body = {
        "model": "tiny",
        "messages": messages,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        **extra,
    }
    text, usage = [], None
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk["choices"]:
                text.append(choice["delta"].get("content") or "")
    assert usage is not None
    return "".join(text), usage


async def run_sessions(url: str, conversation_texts, size_user=None, extra: dict | None = None):
    """``CONCURRENT`` sessions at a time, each one's turns in order; returns [session][turn]
    results. ``conversation_texts(s)`` gives (system text, [user text per turn], [max_tokens
    per turn]); ``size_user(s, t, messages)``, when given, makes a user turn's text instead."""
    results: list[list[TurnResult]] = [[] for _ in range(SESSIONS)]

    async def one_session(http: aiohttp.ClientSession, s: int) -> None:
        system, users, answers = conversation_texts(s)
        messages = [{"role": "system", "content": system}]
        for t in range(TURNS):
            user = users[t] if size_user is None else size_user(s, t, messages)
            messages.append({"role": "user", "content": user})
            answer, usage = await chat_turn(http, url, messages, answers[t], extra or {})
            assert usage["completion_tokens"] == answers[t]
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            assert cached is not None, "the server must run with --enable-prompt-tokens-details"
            results[s].append(TurnResult(usage["prompt_tokens"], cached))
            messages.append({"role": "assistant", "content": answer})

    async with aiohttp.ClientSession() as http:
        for first in range(0, SESSIONS, CONCURRENT):
            await asyncio.gather(*(one_session(http, s) for s in range(first, min(first + CONCURRENT, SESSIONS))))
    return results


def hit_rate_by_turn(results: list[list[TurnResult]]) -> list[float]:
    """Percent of prompt tokens served from the cache, summed over sessions, per turn."""
    out = []
    for t in range(TURNS):
        cached = sum(r[t].cached_tokens for r in results)
        prompt = sum(r[t].prompt_tokens for r in results)
        out.append(100.0 * cached / prompt)
    return out


# ---------------------------------------------------------------------------- the real server


def one_token_words(model_dir: Path) -> dict[str, int]:
    """Words that the tiny model's byte-level BPE holds as one token with their leading
    space (``Ġword``): a text of such words counts one token per word and re-encodes to
    the same ids."""
    vocab = json.loads((Path(model_dir) / "tokenizer.json").read_text())["model"]["vocab"]
    return {tok[1:]: i for tok, i in vocab.items() if re.fullmatch(r"Ġ[a-z]{2,}", tok)}


def post_json(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


def block_size_of(url: str) -> int:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:
        page = resp.read().decode()
    match = re.search(r'^vllm:cache_config_info\{[^}]*\bblock_size="(\d+)"', page, re.M)
    assert match, "vllm:cache_config_info has no block_size"
    return int(match.group(1))


async def test_hit_rate_by_turn_matches_real_vllm(vllm_server):
    url = vllm_server.url
    block_size = block_size_of(url)
    word_ids = one_token_words(vllm_server.paths.model)
    words = sorted(word_ids)
    # Precondition: these words' text re-encodes to one id each, in sequence.
    sample = "".join(" " + w for w in words)
    assert post_json(url + "/tokenize", {"model": "tiny", "prompt": sample, "add_special_tokens": False})["tokens"] == [
        word_ids[w] for w in words
    ]
    plan = make_plan(seed=16, n_words=len(words))
    # The server is shared with other tests and keeps its cache: a few fresh words open
    # the system prompt so that no earlier run's blocks are hit (lengths stay seeded).
    fresh = random.SystemRandom()
    plan.system[:4] = [fresh.randrange(len(words)) for _ in range(4)]

    def real_text(indices: list[int]) -> str:
        return "".join(" " + w for w in (words[i] for i in indices))

    def real_conversation(s: int):
        return real_text(plan.system), [real_text(u) for u in plan.users[s]], plan.answers[s]

    real = await run_sessions(url, real_conversation, extra={"allowed_token_ids": sorted(word_ids.values())})

    # The simulator: the same lengths in its own tokenizer. Its shared prefix (system
    # message and the next message's opening) as long as the real one...
    def tokens(messages: list[dict]) -> list[int]:
        return post_json(url + "/tokenize", {"model": "tiny", "messages": messages})["tokens"]

    system = real_text(plan.system)
    a = tokens([{"role": "system", "content": system}, {"role": "user", "content": " " + words[0]}])
    b = tokens([{"role": "system", "content": system}, {"role": "user", "content": " " + words[1]}])
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    sim_tok = SimTokenizer()
    sim_system = sim_tok.decode(list(range(100, 100 + shared - 5)))  # + <start> system <end> <start> user
    assert count_chat_tokens(sim_tok, [{"role": "system", "content": sim_system}]) == shared

    # ...and every turn's prompt as long as the real one (the answers already are).
    def size_user(s: int, t: int, messages: list[dict]) -> str:
        framing = count_chat_tokens(sim_tok, [*messages, {"role": "user", "content": ""}])
        n = real[s][t].prompt_tokens - framing
        assert n > 0
        return sim_tok.decode([(1000 + 7919 * (s * TURNS + t) + i) % sim_tok.vocab_size for i in range(n)])

    def sim_conversation(s: int):
        return sim_system, [], plan.answers[s]

    config = SimConfig(hardware="instant", model="tiny", block_size=block_size, enable_prompt_tokens_details=True)
    async with serve(config) as sim_url:
        sim = await run_sessions(sim_url, sim_conversation, size_user=size_user)

    assert [[r.prompt_tokens for r in s] for s in sim] == [[r.prompt_tokens for r in s] for s in real]
    real_rates, sim_rates = hit_rate_by_turn(real), hit_rate_by_turn(sim)
    report = " | ".join(
        f"turn {t + 1}: real {r:.1f}% sim {m:.1f}%" for t, (r, m) in enumerate(zip(real_rates, sim_rates))
    )
    # Turns 2+ hit the previous answer's blocks: without them the rate would be far lower.
    assert min(real_rates[1:]) > 50, report
    for r, m in zip(real_rates, sim_rates):
        assert abs(r - m) <= TOLERANCE_POINTS, report
