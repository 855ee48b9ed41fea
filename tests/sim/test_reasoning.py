"""The simulator as a reasoning model (``--reasoning-parser``): thinking streamed before the
answer in vLLM 0.32's chunk layout, its length from the request's effort fields, counted
in max_tokens, completion_tokens and completion_tokens_details."""

import json
import random

import aiohttp
import pytest

from rampwatch.core.errors import UserError
from rampwatch.sim import reasoning
from rampwatch.sim.cli import config_to_argv
from rampwatch.sim.config import SimConfig
from rampwatch.sim.serve_flags import vllm_serve_argv
from rampwatch.sim.server import serve

FAST = dict(hardware="instant", model="tiny", seed=7)
R1 = reasoning.ReasoningConfig("deepseek_r1", tokens=40)


def events(body: str) -> list[str]:
    return [line[len("data: ") :] for line in body.split("\n\n") if line.startswith("data: ")]


def key_shape(obj):
    if isinstance(obj, dict):
        return [(k, key_shape(v)) for k, v in obj.items()]
    if isinstance(obj, list):
        return [key_shape(v) for v in obj[:1]]
    return None


async def chat(url: str, **fields) -> tuple[int, list[dict]]:
    payload = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "ka ri to"}],
        "max_tokens": 200,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        **fields,
    }
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/chat/completions", json=payload) as r:
            text = await r.text()
            if r.status != 200:
                return r.status, [json.loads(text)]
    return 200, [json.loads(e) for e in events(text) if e != "[DONE]"]


def split(chunks: list[dict]) -> tuple[list[str], list[str], dict]:
    """(thinking words, answer words, usage) of a streamed answer."""
    thinking, answer = [], []
    for chunk in chunks[1:-1]:  # the role chunk, the usage chunk
        delta = chunk["choices"][0]["delta"]
        thinking += [delta[k] for k in reasoning.REASONING_FIELDS if delta.get(k)]
        if delta.get("content"):
            answer.append(delta["content"])
    return thinking, answer, chunks[-1]["usage"]


@pytest.mark.parametrize("field", reasoning.REASONING_FIELDS)
async def test_thinking_streams_first_then_the_answer(field, vllm_captures):
    config = SimConfig(**FAST, reasoning=reasoning.ReasoningConfig("deepseek_r1", tokens=40, field=field))
    async with serve(config) as url:
        status, chunks = await chat(url)
    assert status == 200
    thinking, answer, usage = split(chunks)
    assert 20 <= len(thinking) <= 60 and len(thinking) + len(answer) == 200
    assert usage["completion_tokens"] == 200
    assert usage["completion_tokens_details"] == {"reasoning_tokens": len(thinking)}
    # thinking first, then only answer; each part starts without a leading space
    kinds = [next(iter(c["choices"][0]["delta"])) for c in chunks[1:-1]]
    assert kinds == [field] * len(thinking) + ["content"] * len(answer)
    assert not thinking[0].startswith(" ") and not answer[0].startswith(" ")
    if field == "reasoning":  # vLLM 0.32's layout, chunk by chunk (tests/data/vllm-0.32.0-cpu)
        real = [json.loads(e) for e in events((vllm_captures / "chat-stream-reasoning.txt").read_text())[:-1]]
        assert key_shape(chunks[1]) == key_shape(real[1]) and key_shape(chunks[-2]) == key_shape(real[-2])
        assert list(chunks[-1]["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens"] + [
            "completion_tokens_details"
        ]


@pytest.mark.parametrize(
    "fields, thinks",
    [
        ({}, True),
        ({"reasoning_effort": "medium"}, True),
        ({"reasoning_effort": "none"}, False),
        ({"chat_template_kwargs": {"enable_thinking": False}}, False),
        ({"chat_template_kwargs": {"enable_thinking": True}}, True),
        # a non-bool is taken by its truth, as vLLM does (no 400): "no" is a non-empty string
        ({"chat_template_kwargs": {"enable_thinking": "no"}}, True),
        ({"chat_template_kwargs": {"enable_thinking": ""}}, False),
        ({"chat_template_kwargs": {"enable_thinking": 0}}, False),
        ({"chat_template_kwargs": {"enable_thinking": None}}, False),
        ({"chat_template_kwargs": {"other": 1}}, True),
        ({"thinking_token_budget": 0}, False),
    ],
)
async def test_the_request_turns_thinking_on_and_off(fields, thinks):
    async with serve(SimConfig(**FAST, reasoning=R1)) as url:
        status, chunks = await chat(url, **fields)
    thinking, answer, usage = split(chunks)
    assert status == 200 and bool(thinking) is thinks
    # vLLM reports the figure once a parser runs, 0 when the answer did not think
    assert usage["completion_tokens_details"] == {"reasoning_tokens": len(thinking)}


@pytest.mark.parametrize(
    "value, enabled",
    [
        (True, True),
        (False, False),
        ("no", True),
        ("false", True),
        ("", False),
        (0, False),
        (1, True),
        (None, False),
        ([], False),
        ({"a": 1}, True),
    ],
)
def test_enable_thinking_is_read_by_its_truth_as_vllms_parsers_and_templates_do(value, enabled):
    assert reasoning.thinking_enabled(value) is enabled
    mean = reasoning.mean_tokens(R1, {"chat_template_kwargs": {"enable_thinking": value}})
    assert (mean > 0) is enabled


def test_effort_scales_the_mean_and_each_request_draws_around_it():
    rng = random.Random(1)
    means = {e: reasoning.mean_tokens(R1, {"reasoning_effort": e}) for e in ("low", "medium", "high")}
    assert means == {"low": 10, "medium": 40, "high": 160}
    draws = [reasoning.thinking_of(R1, {}, rng).tokens for _ in range(400)]
    assert min(draws) >= 20 and max(draws) <= 60 and abs(sum(draws) / 400 - 40) < 2
    assert draws == [reasoning.thinking_of(R1, {}, r).tokens for r in [random.Random(1)] for _ in range(400)]
    assert reasoning.thinking_of(R1, {"thinking_token_budget": 5}, rng).tokens <= 5


async def test_thinking_counts_in_max_tokens_a_short_answer_is_all_thinking():
    async with serve(SimConfig(**FAST, reasoning=R1)) as url:
        _, chunks = await chat(url, max_tokens=5)
    thinking, answer, usage = split(chunks)
    assert len(thinking) == 5 and answer == [] and chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 5} and usage["completion_tokens"] == 5


async def test_no_end_of_sequence_while_thinking():
    config = SimConfig(**FAST, reasoning=R1, eos_probability=0.5)
    async with serve(config) as url:
        _, chunks = await chat(url, ignore_eos=False)
    thinking, answer, usage = split(chunks)
    assert usage["completion_tokens_details"]["reasoning_tokens"] == len(thinking) >= 20 and len(answer) >= 1


async def test_hidden_thinking_and_a_server_without_the_usage_figure():
    config = SimConfig(**FAST, reasoning=reasoning.ReasoningConfig("x", tokens=40, usage_details=False))
    async with serve(config) as url:
        _, hidden = await chat(url, include_reasoning=False)
        _, shown = await chat(url)
    thinking, answer, usage = split(hidden)
    assert thinking == [] and 140 <= len(answer) <= 180 and usage["completion_tokens"] == 200
    assert "completion_tokens_details" not in usage
    assert split(shown)[0] and "completion_tokens_details" not in split(shown)[2]


async def test_completions_and_servers_without_a_parser_never_think():
    async with serve(SimConfig(**FAST, reasoning=R1)) as url:
        async with aiohttp.ClientSession() as s:
            payload = {"model": "tiny", "prompt": "ka ri", "max_tokens": 8, "stream": True, "ignore_eos": True}
            payload["stream_options"] = {"include_usage": True}
            async with s.post(url + "/v1/completions", json=payload) as r:
                body = await r.text()
    assert '"reasoning' not in body and "completion_tokens_details" not in body
    async with serve(SimConfig(**FAST)) as url:
        _, chunks = await chat(url, reasoning_effort="high")
    thinking, _, usage = split(chunks)
    assert thinking == [] and "completion_tokens_details" not in usage


async def test_the_whole_answer_splits_thinking_and_content():
    async with serve(SimConfig(**FAST, reasoning=R1)) as url:
        async with aiohttp.ClientSession() as s:
            payload = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
            payload["ignore_eos"] = True
            async with s.post(url + "/v1/chat/completions", json=payload) as r:
                body = await r.json()
    message, usage = body["choices"][0]["message"], body["usage"]
    thought = usage["completion_tokens_details"]["reasoning_tokens"]
    assert 20 <= thought <= 60
    assert len(message["reasoning"].split()) == thought and len(message["content"].split()) == 100 - thought


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"reasoning_effort": "huge"}, "reasoning_effort"),
        ({"reasoning_effort": {"level": "high"}}, "reasoning_effort"),  # unhashable: was a 500
        ({"reasoning_effort": ["high"]}, "reasoning_effort"),
        ({"chat_template_kwargs": "off"}, "chat_template_kwargs"),
        ({"thinking_token_budget": -1}, "thinking_token_budget"),
    ],
)
async def test_bad_reasoning_fields_are_refused_as_vllm_does(fields, param):
    async with serve(SimConfig(**FAST, reasoning=R1)) as url:
        status, (body,) = await chat(url, **fields)
    assert status == 400 and body["error"]["param"] == param


def test_flags_round_trip_and_the_vllm_line_keeps_the_parser():
    config = SimConfig(**FAST, reasoning=reasoning.ReasoningConfig("qwen3", 64, "reasoning_content", False))
    argv = config_to_argv(config)
    assert argv[-7:] == [
        "--reasoning-parser",
        "qwen3",
        "--reasoning-tokens",
        "64",
        "--reasoning-field",
        "reasoning_content",
        "--no-reasoning-usage",
    ]
    line = vllm_serve_argv(["rampwatch", "sim", *argv], "m")
    assert "--reasoning-parser" in line and "qwen3" in line and "--reasoning-tokens" not in line
    assert "--no-reasoning-usage" not in line and "--reasoning-field" not in line


@pytest.mark.parametrize(
    "config, flag",
    [
        (reasoning.ReasoningConfig("r", tokens=-1), "--reasoning-tokens"),
        (reasoning.ReasoningConfig("r", field="thinking"), "--reasoning-field"),
        (reasoning.ReasoningConfig(""), "--reasoning-parser"),
    ],
)
def test_bad_reasoning_flags_are_one_line(config, flag):
    with pytest.raises(UserError, match=f"^{flag}"):
        SimConfig(**FAST, reasoning=config).resolved()


async def test_continuous_usage_counts_the_thinking_so_far():
    async with serve(SimConfig(**FAST, reasoning=R1)) as url:
        _, chunks = await chat(
            url, max_tokens=60, stream_options={"include_usage": True, "continuous_usage_stats": True}
        )
    thinking, _, usage = split(chunks)
    shown = [c["usage"]["completion_tokens_details"]["reasoning_tokens"] for c in chunks[1:-1]]
    assert shown == [min(i + 1, len(thinking)) for i in range(60)]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": len(thinking)}


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--reasoning-tokens", "64"],
            "--reasoning-tokens: shapes a reasoning model's answers; add --reasoning-parser",
        ),
        (["--no-reasoning-usage"], "--no-reasoning-usage: shapes"),
        (["--reasoning-parser", "r1", "--reasoning-tokens", "-5"], "--reasoning-tokens -5: must be >= 0"),
    ],
)
def test_reasoning_flags_on_the_command_line(argv, message):
    import argparse

    from rampwatch.sim.cli import config_from_args, configure

    parser = argparse.ArgumentParser()
    configure(parser)
    with pytest.raises(UserError, match=f"^{message}"):
        config_from_args(parser.parse_args(["--hardware", "instant", "--model", "tiny", *argv]))
    config = config_from_args(parser.parse_args(["--model", "tiny", "--reasoning-parser", "qwen3"]))
    assert config.reasoning == reasoning.ReasoningConfig("qwen3")


async def test_a_speculative_step_splits_its_tokens_into_thinking_and_answer_chunks():
    """Accepted drafts arrive several tokens a chunk; a step that crosses from thinking to
    the answer sends a thinking chunk and an answer chunk, and the texts are those of the
    same request without speculation."""
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "acceptance": [0.9, 0.9, 0.9, 0.9]})
    texts = []
    for speculative_config in (None, spec):
        async with serve(SimConfig(**FAST, reasoning=R1, speculative_config=speculative_config)) as url:
            status, chunks = await chat(url, seed=3)
        assert status == 200
        thinking, answer, usage = split(chunks)
        assert usage["completion_tokens"] == 200
        assert usage["completion_tokens_details"]["reasoning_tokens"] == len("".join(thinking).split())
        assert all(len(c["choices"][0]["delta"]) == 1 for c in chunks[1:-1])  # one kind a chunk
        texts.append(("".join(thinking), "".join(answer), len(chunks)))
    (plain_thinking, plain_answer, plain_chunks), (spec_thinking, spec_answer, spec_chunks) = texts
    assert (spec_thinking, spec_answer) == (plain_thinking, plain_answer)
    assert spec_chunks < plain_chunks / 2  # most steps gave several tokens
