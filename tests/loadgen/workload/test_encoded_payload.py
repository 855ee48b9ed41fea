"""A payload encoded in the builder process: only plain JSON is, it reads back as the
same mapping, travels as its bytes, and splices into a surrounding object exactly."""

from __future__ import annotations

import datetime
import json
import pickle

import orjson
import pytest

from rampwatch.loadgen.workload.encoded_payload import CLIENT_FIELDS, EncodedPayload, encode_payload

PLAIN = {
    "messages": [{"role": "user", "content": [{"type": "text", "text": "héllo ✓"}, {"type": "image_url"}]}],
    "max_completion_tokens": 8,
    "ignore_eos": True,
    "temperature": 0.7,
    "seed": None,
    "prompt": [1, 2, 3],
    "big": 2**63 - 1,
}


def test_a_plain_payload_is_encoded_and_reads_back_as_the_same_mapping():
    encoded = encode_payload(PLAIN)
    assert isinstance(encoded, EncodedPayload)
    assert encoded.json == orjson.dumps(PLAIN)
    assert encoded == PLAIN and PLAIN == encoded and dict(encoded) == PLAIN
    assert encoded["max_completion_tokens"] == 8 and len(encoded) == len(PLAIN) and list(encoded) == list(PLAIN)
    # every encoder gives the same bytes for what it reads back (the aiohttp path: json.dumps)
    assert json.dumps(dict(encoded)) == json.dumps(PLAIN)
    assert encode_payload(encoded) is encoded


@pytest.mark.parametrize(
    "payload",
    [
        {"prompt": "x", "model": "other"},  # fields the client sets: kept where they are
        {"prompt": "x", "stream": False},
        {"prompt": "x", "stream_options": {"include_usage": False}},
        {"prompt": "x", "temperature": float("nan")},  # orjson would send null, json NaN
        {"prompt": "x", "top_p": float("inf")},
        {"prompt": "lone \ud800 surrogate"},  # orjson refuses it; json escapes it
        {"prompt": "x", "stop": ("a", "b")},  # a tuple would read back as a list
        {"prompt": "x", "logit_bias": {50256: -100}},  # a key that is not a string
        {"prompt": "x", "extra": {"when": datetime.date(2026, 1, 1)}},  # a YAML date
        {"prompt": [2**64]},  # beyond orjson's integers
        {"prompt": "x", "flag": type("Sub", (str,), {})("y")},  # a subclass: not plain
    ],
)
def test_anything_but_plain_json_stays_a_dict(payload):
    assert encode_payload(payload) is None


def test_the_client_fields_are_the_ones_it_sets():
    assert CLIENT_FIELDS == {"model", "stream", "stream_options"}


def test_it_travels_as_its_bytes_alone():
    encoded = encode_payload({"messages": [{"role": "user", "content": "x" * 100_000}]})
    assert encoded is not None
    dict(encoded)  # decoded once: the decoded fields do not travel
    pickled = pickle.dumps(encoded, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(pickled) < len(encoded.json) + 100
    back = pickle.loads(pickled)
    assert isinstance(back, EncodedPayload) and back.json == encoded.json and back == encoded


@pytest.mark.parametrize("payload", [PLAIN, {"prompt": "x"}, {}])
@pytest.mark.parametrize(
    "before, after",
    [
        ({"model": "m"}, {"stream": True, "stream_options": {"include_usage": True}}),
        ({"model": "m"}, {}),
        ({}, {"s": 1}),
    ],
)
def test_within_is_the_json_of_the_whole_object(payload, before, after):
    marker = "\x00payload"
    framed = orjson.dumps({**before, marker: None, **after})
    head, _, tail = framed.rpartition(orjson.dumps({marker: None})[1:-1])
    encoded = encode_payload(payload)
    assert encoded is not None
    assert encoded.within(head, tail) == orjson.dumps({**before, **payload, **after})
