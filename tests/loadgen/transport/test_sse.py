import random

import pytest

from rampwatch.loadgen.transport import sse


def decode_all(body: bytes, pieces: list[int]) -> list[bytes]:
    decoder = sse.SSEDecoder()
    out, pos = [], 0
    for size in pieces:
        out += decoder.feed(body[pos : pos + size])
        pos += size
    out += decoder.feed(body[pos:])
    out += decoder.flush()
    return out


BODY = b'data: {"a":1}\n\n: ping\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
EXPECTED = [b'{"a":1}', b'{"b":2}', b"[DONE]"]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("seed", range(5))
def test_events_survive_any_split_and_newline_style(newline, seed):
    body = BODY.replace(b"\n", newline)
    rng = random.Random(seed)
    pieces = [rng.randint(1, 5) for _ in range(len(body))]
    assert decode_all(body, pieces) == EXPECTED


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    body = b'data: {"a":1}\r\n\r\ndata: [DONE]\r\n\r\n'
    cut = body.index(b"\r\n") + 1  # the read ends right after '\r'
    assert decode_all(body, [cut]) == [b'{"a":1}', b"[DONE]"]


def test_event_without_final_blank_line_is_flushed():
    assert decode_all(b'data: {"a":1}\n\ndata: [DONE]', []) == [b'{"a":1}', b"[DONE]"]


def test_multiline_data_joined_and_other_fields_ignored():
    body = b"event: message\nid: 3\ndata: line1\ndata:line2\n\n"
    assert decode_all(body, []) == [b"line1\nline2"]


@pytest.mark.parametrize(
    "payload, kind",
    [
        (b'{"choices":[{"index":0,"text":"","finish_reason":null}]}', sse.EVENT_TOKEN),
        (b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', sse.EVENT_TOKEN),
        (b'{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":8}}', sse.EVENT_USAGE),
        (b"[DONE]", sse.EVENT_DONE),
        (b'{"error":{"message":"boom","type":"InternalServerError","code":500}}', sse.EVENT_ERROR),
        (b'{"object":"error","message":"old style"}', sse.EVENT_ERROR),
        (b'{"choices":[],"usage":null}', sse.EVENT_OTHER),
        # text that *contains* the usage marker stays a token chunk (quotes are escaped in JSON)
        (b'{"choices":[{"text":"\\"choices\\":[] \\"usage\\":{"}]}', sse.EVENT_TOKEN),
    ],
)
def test_classify_event(payload, kind):
    assert sse.classify_event(payload) == kind


def test_error_message_shapes(vllm_captures):
    body = sse.decode_json((vllm_captures / "error-too-long.json").read_bytes())
    assert sse.error_message(body).startswith("max_tokens=5000 cannot be greater than max_model_len=2048")
    assert sse.error_message({"error": "plain"}) == "plain"
    assert sse.error_message({"object": "error", "message": "m"}) == "m"
    assert sse.error_message({"detail": "Not Found"}) == "Not Found"
    assert sse.error_message(None) is None


# -- token_events_only: the fast path for reads that hold only whole token events ---------

TOKEN = b'data: {"id":"c","choices":[{"index":0,"text":"ab","finish_reason":null}]}\n\n'
FINISH = b'data: {"id":"c","choices":[{"index":0,"text":"","finish_reason":"length"}]}\n\n'
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":8}}\n\n'


@pytest.mark.parametrize(
    "read, expected",
    [
        (TOKEN, 1),
        (TOKEN * 3, 3),
        (TOKEN + FINISH, 2),  # the finish reason is read from the last event at the end
        (FINISH, 1),
        (USAGE, 0),
        (TOKEN + USAGE, 0),
        (b"data: [DONE]\n\n", 0),
        (TOKEN + b"data: [DONE]\n\n", 0),
        (TOKEN[:-1], 0),  # an unfinished event
        (TOKEN + TOKEN[:20], 0),
        (TOKEN.replace(b"\n", b"\r\n"), 0),
        (b": ping\n\n" + TOKEN, 0),
        (b'event: message\ndata: {"choices":[{"text":"x"}]}\n\n', 0),
        (b'data: {"choices":[{"text":"x"}]}\ndata: {"more":1}\n\n', 0),  # one event, two data lines
        (b'data: {"object":"error","message":"boom"}\n\n', 0),
    ],
)
def test_token_events_only(read, expected):
    assert sse.SSEDecoder().token_events_only(read) == expected


def test_token_events_only_refuses_while_an_event_is_pending():
    decoder = sse.SSEDecoder()
    assert decoder.feed(TOKEN[:30]) == []
    assert decoder.token_events_only(TOKEN) == 0  # the pending half comes first
    assert len(decoder.feed(TOKEN[30:])) == 1
    assert decoder.token_events_only(TOKEN) == 1


def test_last_token_payload():
    assert sse.last_token_payload(TOKEN + FINISH) == FINISH[6:-2]
    assert sse.last_token_payload(TOKEN) == TOKEN[6:-2]
