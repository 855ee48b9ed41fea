"""A stream whose final ``usage`` is not a token count (a string, a negative number, a
number past what a recording stores) ends its request as failed with a classified error,
never as a lost request or an overflow."""

from __future__ import annotations

import pytest

from rampwatch.core.timeline import MAX_TOKEN_COUNT
from rampwatch.loadgen.transport.stream_state import token_count, usage_counts
from tests.faults.conftest import completions_request, make_client

USAGE = b'"usage":{"prompt_tokens":4,"total_tokens":12,"completion_tokens":8}'


def with_usage(server, usage: bytes) -> None:
    server.events = [e.replace(USAGE, b'"usage":' + usage) for e in server.events]


@pytest.mark.parametrize(
    "usage, message",
    [
        (b'{"prompt_tokens":4,"completion_tokens":"lots"}', "usage.completion_tokens: 'lots' is not a token count"),
        (b'{"prompt_tokens":4,"completion_tokens":-3}', "usage.completion_tokens: -3 is not a token count"),
        (
            b'{"prompt_tokens":4,"completion_tokens":4294967296}',
            "usage.completion_tokens: 4294967296 is not a token count",
        ),
        (
            b'{"prompt_tokens":99999999999999999999,"completion_tokens":8}',
            "usage.prompt_tokens: 99999999999999999999 is not a token count",
        ),
        (b'{"prompt_tokens":4,"completion_tokens":true}', "usage.completion_tokens: True is not a token count"),
        (b'{"prompt_tokens":4,"completion_tokens":2.5}', "usage.completion_tokens: 2.5 is not a token count"),
    ],
)
async def test_a_bad_usage_fails_the_request_with_the_field_named(misbehaving, usage, message):
    with_usage(misbehaving, usage)
    async with make_client(misbehaving.url) as client:
        record = await client.send(completions_request(), request_id=1, scheduled_at=0.0)
    assert not record.ok
    assert record.error_class == "stream_error"
    assert record.error == message
    assert record.end_at is not None and record.first_token_at is not None


async def test_the_capture_as_it_is_counts(misbehaving):
    async with make_client(misbehaving.url) as client:
        record = await client.send(completions_request(), request_id=1, scheduled_at=0.0)
    assert record.ok and (record.prompt_tokens, record.completion_tokens) == (4, 8)


@pytest.mark.parametrize(
    "usage, expected",
    [
        ({"prompt_tokens": 4, "completion_tokens": 8}, (4, 8)),
        ({"completion_tokens": 8}, (None, 8)),
        ({"prompt_tokens": None, "completion_tokens": None}, (None, 0)),
        ({"prompt_tokens": 4.0, "completion_tokens": 8.0}, (4, 8)),
        ({"prompt_tokens": 0, "completion_tokens": MAX_TOKEN_COUNT}, (0, MAX_TOKEN_COUNT)),
    ],
)
def test_usage_counts(usage, expected):
    assert usage_counts(usage) == expected


@pytest.mark.parametrize("value", [MAX_TOKEN_COUNT + 1, -1, "7", [7], {"n": 7}, False, float("nan"), 1.5])
def test_token_count_refuses(value):
    with pytest.raises(ValueError, match=r"^usage\.n: .* is not a token count$"):
        token_count({"n": value}, "n")
