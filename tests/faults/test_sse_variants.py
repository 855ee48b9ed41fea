"""SSE streams that are valid but not written the way vLLM writes them (JSON with spaces,
reordered keys, ``data:`` without a space, CRLF line ends, comment and keep-alive lines)
give the same record as vLLM's own stream: the byte-pattern fast path stays for vLLM's
compact JSON, and anything it does not recognise is parsed."""

from __future__ import annotations

import json

import pytest

from tests.faults.conftest import captured_events, completions_request, make_client


def spaced(event: bytes) -> bytes:
    """Re-encode an event's JSON with spaces after ':' and ',' (Python's json default)."""
    data = event[len(b"data: ") :].strip()
    if data == b"[DONE]":
        return event
    return b"data: " + json.dumps(json.loads(data)).encode() + b"\n\n"


def reordered(event: bytes) -> bytes:
    data = event[len(b"data: ") :].strip()
    if data == b"[DONE]":
        return event
    obj = json.loads(data)
    return b"data: " + json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":")).encode() + b"\n\n"


VARIANTS = {
    "spaced JSON": lambda events: [spaced(e) for e in events],
    "reordered keys": lambda events: [reordered(e) for e in events],
    "data: without a space": lambda events: [e.replace(b"data: ", b"data:", 1) for e in events],
    "CRLF line ends": lambda events: [e.replace(b"\n", b"\r\n") for e in events],
    "comments and keep-alives": lambda events: [
        b": ping\n\n" + e.replace(b"data: ", b": keep-alive\ndata: ", 1) for e in events
    ],
    "event and id fields": lambda events: [b"event: message\nid: 7\n" + e for e in events],
    "all of them": lambda events: [
        spaced(e).replace(b"data: ", b": ping\r\ndata:", 1).replace(b"\n", b"\r\n") for e in events
    ],
}


async def record_for(server, events):
    server.events = events
    async with make_client(server.url) as client:
        return await client.send(completions_request(), request_id=1, scheduled_at=0.0)


@pytest.mark.parametrize("variant", VARIANTS)
async def test_a_valid_stream_in_another_layout_gives_the_same_record(misbehaving, variant):
    reference = await record_for(misbehaving, captured_events())
    assert reference.ok and reference.completion_tokens == 8
    record = await record_for(misbehaving, VARIANTS[variant](captured_events()))
    assert record.ok, record.error
    assert (record.prompt_tokens, record.completion_tokens, record.tokens_from_usage) == (4, 8, True)
    assert record.finish_reason == reference.finish_reason == "length"
    assert len(record.chunk_times) == len(reference.chunk_times)
    assert record.first_token_at is not None


async def test_an_error_object_in_spaced_json_fails_the_request_with_its_message(misbehaving):
    events = captured_events()[:2] + [b'data: {"error": {"message": "engine died", "code": 500}}\n\n']
    record = await record_for(misbehaving, events)
    assert not record.ok and record.error_class == "stream_error" and record.error == "engine died"


async def test_control_characters_in_a_servers_error_are_escaped(misbehaving):
    events = captured_events()[:2] + [
        b'data: {"error": {"message": "\\u001b[2J\\u001b[31mboom\\u0007", "code": 500}}\n\n'
    ]
    record = await record_for(misbehaving, events)
    assert record.error == "\\x1b[2J\\x1b[31mboom\\x07"
