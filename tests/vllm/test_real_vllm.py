"""The real vLLM CPU server, serving the tiny random Llama: the reference every
rampwatch number is checked against."""

import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REQUIRED_FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
}


def post_stream(url: str, body: dict) -> list[dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=120) as resp:
        assert resp.status == 200
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            payload = line[len("data: ") :]
            if payload == "[DONE]":
                events.append({"done": True})
                break
            events.append(json.loads(payload))
    return events


def test_server_is_a_live_vllm_process(vllm_server):
    assert vllm_server.proc.poll() is None
    cmdline = open(f"/proc/{vllm_server.pid}/cmdline", "rb").read().split(b"\0")
    assert b"vllm.entrypoints.openai.api_server" in cmdline
    with urllib.request.urlopen(vllm_server.url + "/version", timeout=10) as resp:
        assert json.load(resp)["version"].startswith("0.32")


@pytest.mark.parametrize("max_tokens", [1, 7, 33])
def test_streamed_completion_usage(vllm_server, max_tokens):
    events = post_stream(
        vllm_server.url + "/v1/completions",
        {
            "model": "tiny",
            "prompt": "the server queues requests when the batch is full",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1] == {"done": True}
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert usage["completion_tokens"] == max_tokens
    assert usage["prompt_tokens"] > 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + max_tokens
    token_chunks = [e for e in events[:-2] if e.get("choices")]
    # One chunk per token at the default stream interval, empty-text chunks included.
    assert len(token_chunks) == max_tokens
    assert token_chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_streamed_chat_completion_usage(vllm_server):
    events = post_stream(
        vllm_server.url + "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": [
                {"role": "system", "content": "you are a helpful assistant"},
                {"role": "user", "content": "summarise the document"},
            ],
            "max_completion_tokens": 12,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1] == {"done": True}
    assert events[0]["choices"][0]["delta"].get("role") == "assistant"
    usage = events[-2]["usage"]
    assert usage["completion_tokens"] == 12
    assert usage["prompt_tokens"] > 10


def test_metrics_families(vllm_server):
    post_stream(
        vllm_server.url + "/v1/completions",
        {"model": "tiny", "prompt": "numbers 1 2 3", "max_tokens": 4, "ignore_eos": True, "stream": True},
    )
    with urllib.request.urlopen(vllm_server.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in REQUIRED_FAMILIES.items():
        assert name in families, f"{name} missing from /metrics"
        assert families[name].type == kind
        labels = {k for s in families[name].samples for k in s.labels}
        assert {"engine", "model_name"} <= labels
    generated = sum(s.value for s in families["vllm:generation_tokens"].samples if s.name.endswith("_total"))
    assert generated >= 4
