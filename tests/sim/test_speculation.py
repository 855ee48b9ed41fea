"""Speculative decoding in the simulator: the flag's checks, the dynamic schedule, the
draws, the engine's steps and cost, the streamed chunks and vLLM's counters."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rampwatch.core.errors import UserError
from rampwatch.sim.config import SimConfig
from rampwatch.sim.engine import Engine, SimRequest
from rampwatch.sim.metrics import make_registry, render
from rampwatch.sim.speculation import SPEC_PRESETS, SpecConfig, Speculator, parse_speculative_config


def spec(text: str) -> SpecConfig:
    return parse_speculative_config(text)


@pytest.mark.parametrize(
    ("text", "method", "k", "rates"),
    [
        ('{"method": "ngram", "num_speculative_tokens": 3}', "ngram", 3, SPEC_PRESETS["ngram"].acceptance[:3]),
        # longer drafts than the preset's table repeat its last rate
        ('{"method": "eagle", "num_speculative_tokens": 6}', "eagle", 6, (0.75, 0.65, 0.55, 0.5, 0.5, 0.5)),
        ('{"method": "deepseek_mtp", "num_speculative_tokens": 1}', "mtp", 1, (0.85,)),
        ('{"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2}', "eagle3", 2, (0.8, 0.7)),
        ('{"model": "meta-llama/Llama-3.2-1B", "num_speculative_tokens": 2}', "draft_model", 2, (0.7, 0.6)),
        # vLLM's synthetic rates are unconditional: 0.8, then 0.4 of all drafts = half of those at 1
        (
            '{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",'
            ' "synthetic_acceptance_rates": [0.8, 0.4]}',
            "ngram",
            2,
            (0.8, 0.5),
        ),
        # a mean acceptance length of 2.5 at k=3: vLLM's minimum-variance schedule [1, 0.5, 0]
        (
            '{"method": "eagle", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic",'
            ' "synthetic_acceptance_length": 2.5}',
            "eagle",
            3,
            (1.0, 0.5, 0.0),
        ),
        ('{"method": "ngram", "num_speculative_tokens": 2, "acceptance": [0.9, 0.1]}', "ngram", 2, (0.9, 0.1)),
    ],
)
def test_the_flag_gives_the_method_its_length_and_conditional_rates(text, method, k, rates):
    config = spec(text)
    assert (config.method, config.num_speculative_tokens) == (method, k)
    assert config.acceptance == pytest.approx(rates)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[1, 2]", "must be a JSON object"),
        ('{"method": 3, "num_speculative_tokens": 2}', "method must be a string"),
        ('{"method": "ngram", "num_speculative_tokens": true}', "num_speculative_tokens"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "acceptance": [0.5]}', "one conditional rate per position"),
        ('{"method": "ngram", "num_speculative_tokens": 2, "acceptance": [0.5, 1.5]}', "numbers in [0, 1]"),
        (
            '{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic"}',
            "exactly one of",
        ),
        (
            '{"method": "ngram", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",'
            ' "synthetic_acceptance_rates": [0.3, 0.6]}',
            "non-increasing",
        ),
        ('{"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": []}', "non-empty"),
        (
            '{"method": "ngram", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[2, 8, 1]]}',
            "must start at 1",
        ),
        (
            '{"method": "ngram", "num_speculative_tokens": 2,'
            ' "num_speculative_tokens_per_batch_size": [[1, 8, 1], [4, 9, 0]]}',
            "must not overlap",
        ),
    ],
)
def test_a_bad_value_is_refused_naming_the_flag_and_the_key(text, said):
    with pytest.raises(UserError) as exc:
        spec(text)
    assert str(exc.value).startswith("--speculative-config: ") and said in str(exc.value)


def test_the_dynamic_schedule_is_vllms_dense_lookup():
    # vLLM's own example (spec_decode/dynamic/utils.py): the gap 17..31 carries K=3 over;
    # past the last range its K carries on; never above num_speculative_tokens.
    config = spec(
        '{"method": "ngram", "num_speculative_tokens": 3,'
        ' "num_speculative_tokens_per_batch_size": [[1, 16, 5], [32, 128, 2]]}'
    )
    table = config.draft_len_by_batch(200)
    assert table[1] == table[16] == 3  # 5 capped at 3
    assert table[17] == table[31] == 3
    assert table[32] == table[128] == table[200] == 2
    off = spec(
        '{"method": "ngram", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 64, 0]]}'
    )
    assert off.draft_len_by_batch(64)[8:10] == [3, 0]


def test_accepted_positions_converge_to_the_unconditional_rates():
    config = spec('{"method": "eagle", "num_speculative_tokens": 3}')
    speculator = Speculator(config, seed=1, engine_index=0, max_num_seqs=8)
    for _ in range(20000):
        speculator.verify(3)
    stats = speculator.stats
    assert stats.drafts == 20000 and stats.draft_tokens == 60000
    assert sum(stats.accepted_per_pos) == stats.accepted_tokens
    for got, want in zip(stats.accepted_per_pos, config.unconditional()):
        assert got / stats.drafts == pytest.approx(want, abs=4 * math.sqrt(want * (1 - want) / stats.drafts))
    assert 1 + stats.accepted_tokens / stats.drafts == pytest.approx(config.mean_acceptance_length, abs=0.03)


def run_engine(speculative_config: str | None, requests: int = 4, max_tokens: int = 64) -> tuple[Engine, float, int]:
    engine = Engine(SimConfig(speculative_config=speculative_config).resolved())
    for i in range(requests):
        engine.add_request(SimRequest(f"r{i}", list(range(1 + i, 201 + i)), max_tokens=max_tokens), now=0.0)
    t, steps = 0.0, 0
    while engine.has_work():
        result = engine.step(t)
        t += result.duration
        steps += 1
    return engine, t, steps


def test_a_speculating_engine_emits_accepted_drafts_in_fewer_steps_and_counts_them():
    plain, plain_t, plain_steps = run_engine(None)
    engine, t, steps = run_engine('{"method": "eagle3", "num_speculative_tokens": 3}')
    assert engine.stats.generation_tokens == plain.stats.generation_tokens == 4 * 64
    stats = engine.speculator.stats
    # every decode step drafts k (max_tokens cuts no draft, as in vLLM: accepted tokens
    # past it are dropped) and gives one token and its accepted drafts
    assert stats.draft_tokens == 3 * stats.drafts
    assert stats.accepted_tokens + stats.drafts >= 4 * 63
    assert steps < plain_steps and t < plain_t  # at batch 4 the step is memory bound: speculation pays


def test_speculation_costs_more_than_it_gives_when_the_batch_is_compute_bound():
    # 256 requests of 4 tokens each per step: the verification's extra tokens are compute
    _plain, plain_t, _ = run_engine(None, requests=256, max_tokens=32)
    _spec, t, _ = run_engine('{"method": "ngram", "num_speculative_tokens": 3}', requests=256, max_tokens=32)
    assert t > plain_t


def test_speculation_turned_off_above_a_batch_size_drafts_nothing_there():
    engine, _, _ = run_engine(
        '{"method": "ngram", "num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 256, 0]]}',
        requests=8,
    )
    assert engine.speculator.stats.drafts == 0
    assert engine.stats.generation_tokens == 8 * 64


def test_the_kv_of_rejected_drafts_is_rolled_back():
    engine = Engine(SimConfig(speculative_config='{"method": "ngram", "num_speculative_tokens": 4}').resolved())
    req = SimRequest("r", list(range(1, 101)), max_tokens=50)
    engine.add_request(req, now=0.0)
    t = 0.0
    while engine.has_work():
        t += engine.step(t).duration
        if req.status == "running":
            assert req.num_computed_tokens == req.num_tokens - 1  # the last token's KV is never computed


def test_the_counters_are_vllms_families_with_a_series_per_position():
    engine, _, _ = run_engine('{"method": "ngram", "num_speculative_tokens": 3}')
    text = render(make_registry([engine], "m")).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    stats = engine.speculator.stats

    def value(name: str, **labels: str) -> float:
        return next(
            s.value for s in families[name].samples if s.name == name + "_total" and labels.items() <= s.labels.items()
        )

    assert value("vllm:spec_decode_num_drafts") == stats.drafts
    assert value("vllm:spec_decode_num_draft_tokens") == stats.draft_tokens
    assert value("vllm:spec_decode_num_accepted_tokens") == stats.accepted_tokens
    per_pos = families["vllm:spec_decode_num_accepted_tokens_per_pos"]
    positions = {s.labels["position"]: s.value for s in per_pos.samples if s.name.endswith("_total")}
    assert positions == {str(i): float(v) for i, v in enumerate(stats.accepted_per_pos)}
    assert {s.labels["engine"] for s in per_pos.samples} == {"0"}


def test_a_server_without_speculation_exports_no_spec_decode_family():
    engine, _, _ = run_engine(None)
    assert b"spec_decode" not in render(make_registry([engine], "m"))


@pytest.mark.parametrize("chat", [False, True], ids=["completion", "chat"])
async def test_a_streamed_step_of_accepted_drafts_is_one_chunk_of_several_tokens(chat):
    import json as jsonlib

    import aiohttp

    from rampwatch.core.tokenizer import SimTokenizer
    from rampwatch.sim.server import serve

    config = SimConfig(
        hardware="instant", model="tiny", seed=3, speculative_config='{"method": "mtp", "num_speculative_tokens": 3}'
    )
    path, payload = (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a b"}]})
        if chat
        else ("/v1/completions", {"prompt": "a b"})
    )
    payload.update(max_tokens=40, ignore_eos=True, stream=True, stream_options={"include_usage": True})
    async with serve(config) as url, aiohttp.ClientSession() as s, s.post(url + path, json=payload) as r:
        body = await r.text()
    chunks = [jsonlib.loads(line[6:]) for line in body.split("\n\n") if line.startswith("data: {")]
    texts = [
        (c["choices"][0]["delta"].get("content", "") if chat else c["choices"][0]["text"])
        for c in chunks
        if c["choices"]
    ]
    tokenizer = SimTokenizer()
    per_chunk = [tokenizer.count(t) for t in texts if t]
    assert sum(per_chunk) == 40 == chunks[-1]["usage"]["completion_tokens"]
    assert max(per_chunk) > 1 and max(per_chunk) <= 4  # 1 + up to 3 accepted drafts a step
    assert len(per_chunk) < 40
    # the same words as without speculation: the generated tokens do not depend on it
    plain_config = SimConfig(hardware="instant", model="tiny", seed=3)
    payload["stream"] = False
    payload.pop("stream_options")
    async with serve(plain_config) as url, aiohttp.ClientSession() as s, s.post(url + path, json=payload) as r:
        whole = await r.json()
    answer = whole["choices"][0]["message"]["content"] if chat else whole["choices"][0]["text"]
    assert "".join(texts) == answer
