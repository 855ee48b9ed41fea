"""A reasoning model's chat stream: thinking and answer chunks told apart by their bytes,
the first answer's time and the thinking tokens, from usage or counted by the client.

The fixtures (tests/data/reasoning/README.md) hold the same stream in both spellings
(``delta.reasoning``, ``delta.reasoning_content``), with and without
``usage.completion_tokens_details.reasoning_tokens``: all four must give the same figures,
on both transports and however the network splits the stream.
"""

import asyncio
import re
import time
from pathlib import Path

import pytest
from aiohttp import web

from rampwatch.core.timeline import RequestRecord
from rampwatch.loadgen.transport import reasoning, sse, stream_state
from rampwatch.loadgen.transport.client import StreamingClient
from rampwatch.loadgen.workload.requests import PreparedRequest
from rampwatch.loadgen.workload.tokenizers import load_tokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "data" / "reasoning"
SPELLINGS = ["reasoning", "reasoning-content"]
NAMES = [f"{spelling}-{usage}.txt" for spelling in SPELLINGS for usage in ("usage", "no-details")]
# What every fixture holds: a role chunk, five thinking chunks, one with the last thinking
# word and the first answer word, three answer chunks; usage: 10 completion tokens.
THINKING, ANSWER, FIRST_ANSWER_EVENT = 6, 4, 6


def events_of(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]


@pytest.mark.parametrize(
    "payload, parts",
    [
        (b'{"choices":[{"delta":{"role":"assistant","content":""}}]}', (False, False)),
        (b'{"choices":[{"delta":{"reasoning":"Let"}}]}', (True, False)),
        (b'{"choices":[{"delta":{"reasoning_content":"Let"}}]}', (True, False)),
        (b'{"choices":[{"delta":{"reasoning":""}}]}', (False, False)),
        (b'{"choices":[{"delta":{"reasoning":" now","content":"The"}}]}', (True, True)),
        (b'{"choices":[{"delta":{"reasoning":null,"content":"The"}}]}', (False, True)),
        (b'{"choices":[{"delta":{"content":null}}]}', (False, False)),
        # text that looks like a key: its quotes are escaped, so it is answer text
        (b'{"choices":[{"delta":{"content":"\\"reasoning\\":\\"x"}}]}', (False, True)),
        (b'{"choices":[{"delta":{"content":"\\""}}]}', (False, True)),
        # usage's reasoning_tokens before the delta's key (continuous usage, reordered)
        (
            b'{"usage":{"completion_tokens_details":{"reasoning_tokens":2}},"choices":[{"delta":{"reasoning":"x"}}]}',
            (True, False),
        ),
        (
            b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens_details":{"reasoning_tokens":2}}}',
            (False, True),
        ),
        (b'{"choices":[{"delta":{"content":"', (False, False)),  # cut off: no string after the key
        (b'{"choices":[{"delta":{"reasoning":"', (False, False)),
        # both spellings, one empty: either non-empty string is thinking (the byte path
        # stopped at the first key and said not thinking)
        (b'{"choices":[{"delta":{"reasoning":"","reasoning_content":"x"}}]}', (True, False)),
        (b'{"choices":[{"delta":{"reasoning_content":"","reasoning":"x"}}]}', (True, False)),
        (b'{"choices":[{"delta":{"reasoning":"x","reasoning_content":""}}]}', (True, False)),
        (b'{"choices":[{"delta":{"reasoning":"","reasoning_content":"","content":"A"}}]}', (False, True)),
        (b'{"choices":[{"delta":{"reasoning":"","reasoning_content":"x","content":"A"}}]}', (True, True)),
        (b'{"choices":[{"delta":{"reasoning":"","reasoning_content":null}}]}', (False, False)),
    ],
)
def test_delta_parts_from_bytes_agree_with_the_decoded_chunk(payload, parts):
    assert reasoning.delta_parts(payload) == parts
    assert reasoning.decoded_parts(sse.decode_json(payload)) == parts
    if sse.decode_json(payload) is None:
        return  # cut off: not an event the fast path takes whole
    # the fast path's inlined copy, on the read that holds the event
    watch = reasoning.ReasoningWatch()
    still_watching = watch.see_read(b"data: " + payload + b"\n\n", 1, 5.0)
    assert (watch.thinking_chunks == 1, not still_watching) == parts
    assert watch.answer_at == (5.0 if parts[1] else None)


@pytest.mark.parametrize(
    "details, chunks, expected",
    [
        ({"reasoning_tokens": 6}, 6, 6),
        ({"reasoning_tokens": 6.0}, 0, 6),
        ({"reasoning_tokens": 0}, 0, 0),
        ({}, 0, None),
        (None, 0, None),
        ("six", 0, None),
        ({"reasoning_tokens": "6"}, 0, None),
        ({"reasoning_tokens": True}, 0, None),
        ({"reasoning_tokens": -1}, 0, None),
        ({"reasoning_tokens": 6.5}, 0, None),
        ({"reasoning_tokens": 11}, 0, None),  # more than the completion tokens
        ({"reasoning_tokens": 0}, 5, None),  # five thinking chunks streamed: 0 is not true
    ],
)
def test_usage_reasoning_tokens_ignores_what_is_not_a_usable_count(details, chunks, expected):
    usage = (
        {"completion_tokens": 10}
        if details is None
        else {"completion_tokens": 10, "completion_tokens_details": details}
    )
    assert reasoning.usage_reasoning_tokens(usage, 10, chunks) == expected


def _feed(
    reads: list[bytes], fast: bool, keep_text: bool, monkeypatch
) -> tuple[RequestRecord, stream_state.StreamState]:
    ticks = iter(range(1, 1000))
    rec = RequestRecord(id=1, scheduled_at=0.0, sent_at=0.0, end_at=0.0, prompt_tokens=3)
    state = stream_state.StreamState(keep_text=keep_text, chat=True)
    loop = asyncio.new_event_loop()
    try:
        with monkeypatch.context() as patch:
            if not fast:
                patch.setattr(sse.SSEDecoder, "token_events_only", lambda self, data: 0)
            exchange = stream_state.StreamExchange(rec, state, lambda: float(next(ticks)), loop.create_future())
            exchange.on_head(200, "OK", {})
            for read in reads:
                exchange.on_body([read])
        assert exchange.finished.done() and state.done
        state.settle_fast_reads(rec)
    finally:
        loop.close()
    return rec, state


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("group", [1, 2, 3, 4])
@pytest.mark.parametrize("keep_text", [False, True])
def test_fixtures_give_the_same_figures_on_both_parse_paths(name, group, keep_text, monkeypatch):
    events = events_of((FIXTURES / name).read_bytes())
    reads = [b"".join(events[i : i + group]) for i in range(0, len(events), group)]
    answer_tick = float(FIRST_ANSWER_EVENT // group + 1)  # the read that holds the first answer chunk
    tokenizer = load_tokenizer(None)
    for fast in (True, False):
        rec, state = _feed(reads, fast, keep_text, monkeypatch)
        assert rec.first_token_at == 1.0
        assert state.reasoning is not None and state.reasoning.answer_at == answer_tick
        assert state.reasoning.thinking_chunks == THINKING
        assert not state.watching  # nothing more is looked at once the answer started
        rec.completion_tokens, rec.tokens_from_usage = 10, True
        count = (lambda state=state: tokenizer.count(state.thinking_text())) if keep_text else None
        reasoning.settle(rec, state.reasoning, state.usage, count)
        assert rec.first_answer_at == answer_tick
        assert (rec.reasoning_tokens, rec.answer_tokens) == (THINKING, ANSWER)
        assert rec.reasoning_from_usage is name.endswith("-usage.txt")


def test_a_completions_stream_is_never_watched():
    state = stream_state.StreamState(keep_text=False)
    assert state.reasoning is None and not state.watching


@pytest.mark.parametrize("fast", [True, False])
def test_a_plain_chat_stream_stops_being_watched_at_its_first_answer_chunk(vllm_captures, fast, monkeypatch):
    events = events_of((vllm_captures / "chat-stream.txt").read_bytes())
    seen = []
    for method in ("see", "see_read"):
        original = getattr(reasoning.ReasoningWatch, method)

        def counting(self, payload, *args, original=original):
            seen.append(payload)
            return original(self, payload, *args)

        monkeypatch.setattr(reasoning.ReasoningWatch, method, counting)
    rec, state = _feed(events, fast, False, monkeypatch)
    # the role chunk, the empty first chunk, the first "content" chunk: then no more
    assert len(seen) == 3 and len(rec.chunk_times) == 4
    assert state.reasoning is not None and state.reasoning.thinking_chunks == 0


# -- through the client, both transports --


@pytest.fixture(params=["http_stream", "aiohttp"], autouse=True)
def transport(request, monkeypatch):
    if request.param == "aiohttp":
        monkeypatch.setenv("RAMPWATCH_HTTP_CLIENT", "aiohttp")
    else:
        monkeypatch.delenv("RAMPWATCH_HTTP_CLIENT", raising=False)
    return request.param


class Replay:
    """Serves one SSE body event by event, ``gap`` seconds apart."""

    def __init__(self) -> None:
        self.body = b""
        self.gap = 0.02

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in events_of(self.body):
            await resp.write(event)
            await asyncio.sleep(self.gap)
        await resp.write_eof()
        return resp


@pytest.fixture
async def replay():
    server = Replay()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    yield server
    await runner.cleanup()


def chat_req() -> PreparedRequest:
    return PreparedRequest("chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}, 12, 10)


async def _send(replay, body: bytes, **client_kw) -> RequestRecord:
    replay.body = body
    t0 = time.monotonic()
    async with StreamingClient(replay.url + "/v1", "tiny", clock=lambda: time.monotonic() - t0, **client_kw) as client:
        return await client.send(chat_req(), 1, 0.0)


def _without_usage(body: bytes) -> bytes:
    return b"".join(e for e in events_of(body) if b'"choices":[]' not in e)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("usage", [True, False])
async def test_fixtures_through_the_client(replay, name, usage):
    body = (FIXTURES / name).read_bytes()
    rec = await _send(replay, body if usage else _without_usage(body), fallback_tokenizer=load_tokenizer(None))
    assert rec.ok, rec.error
    assert rec.tokens_from_usage is usage
    # the tokenizer counts what usage says: 6 thinking words, 4 answer words
    assert (rec.completion_tokens, rec.reasoning_tokens, rec.answer_tokens) == (10, THINKING, ANSWER)
    assert rec.reasoning_from_usage is (usage and name.endswith("-usage.txt"))
    # the first answer came FIRST_ANSWER_EVENT gaps after the first token; TTFT unchanged
    assert rec.ttft is not None and rec.ttfa is not None
    gap = replay.gap
    assert FIRST_ANSWER_EVENT * gap * 0.8 <= rec.ttfa - rec.ttft <= FIRST_ANSWER_EVENT * gap * 4
    assert rec.first_answer_at == pytest.approx(rec.chunk_times[FIRST_ANSWER_EVENT - 1])
    assert rec.generated_text is None


async def test_without_a_tokenizer_thinking_chunks_are_counted(replay):
    rec = await _send(replay, (FIXTURES / "reasoning-no-details.txt").read_bytes())
    assert rec.ok and rec.tokens_from_usage and rec.completion_tokens == 10
    assert rec.reasoning_tokens == THINKING and rec.reasoning_from_usage is False


async def test_kept_text_is_the_answer_only(replay):
    rec = await _send(replay, (FIXTURES / "reasoning-usage.txt").read_bytes(), keep_generated_text=True)
    assert rec.generated_text == "The sky is blue"


@pytest.mark.parametrize("bad", [b'"reasoning_tokens":11', b'"reasoning_tokens":-3', b'"reasoning_tokens":"6"'])
async def test_a_bad_usage_figure_is_ignored_and_the_client_counts(replay, bad):
    body = (FIXTURES / "reasoning-usage.txt").read_bytes().replace(b'"reasoning_tokens":6', bad)
    rec = await _send(replay, body, fallback_tokenizer=load_tokenizer(None))
    assert rec.ok and rec.completion_tokens == 10
    assert rec.reasoning_tokens == THINKING and rec.reasoning_from_usage is False


async def test_cut_short_while_thinking_has_no_answer_time(replay):
    events = events_of((FIXTURES / "reasoning-usage.txt").read_bytes())
    body = b"".join(events[:4]) + b"data: [DONE]\n\n"  # role chunk, three thinking chunks
    rec = await _send(replay, body)
    assert rec.ok and rec.first_answer_at is None and rec.reasoning_tokens == 3
    assert rec.ttft is not None and rec.ttfa is None


async def test_hidden_thinking_counted_by_usage_times_the_answer(replay):
    """``include_reasoning: false``: no thinking chunk, but usage says the model thought."""
    events = events_of((FIXTURES / "reasoning-usage.txt").read_bytes())
    body = b"".join([events[0], *events[6:]]).replace(b'"reasoning":" now",', b"")
    rec = await _send(replay, body)
    assert rec.ok and rec.reasoning_tokens == THINKING and rec.reasoning_from_usage is True
    assert rec.first_answer_at == pytest.approx(rec.chunk_times[0])


async def test_a_plain_chat_stream_has_no_reasoning_fields(replay, vllm_captures):
    rec = await _send(replay, (vllm_captures / "chat-stream.txt").read_bytes(), fallback_tokenizer=load_tokenizer(None))
    assert rec.ok and rec.completion_tokens == 4
    assert rec.first_answer_at is None and rec.reasoning_tokens is None and rec.reasoning_from_usage is None
    assert rec.ttfa == rec.ttft


# -- real vLLM 0.32 captures (tests/data/vllm-0.32.0-cpu/README.md) --


async def test_real_vllm_reasoning_stream(replay, vllm_captures):
    """Four thinking chunks, then the answer; vLLM's usage says 0 thinking tokens (its
    count needs a ``<think>`` in the output), which the four chunks contradict: ignored."""
    rec = await _send(replay, (vllm_captures / "chat-stream-reasoning.txt").read_bytes())
    assert rec.ok and rec.tokens_from_usage and rec.completion_tokens == 24
    assert rec.reasoning_tokens == 4 and rec.reasoning_from_usage is False and rec.answer_tokens == 20
    assert rec.first_answer_at == pytest.approx(rec.chunk_times[4])  # role, 4 thinking, answer


async def test_real_vllm_reasoning_cut_short(replay, vllm_captures):
    rec = await _send(replay, (vllm_captures / "chat-stream-reasoning-cut.txt").read_bytes())
    assert rec.ok and rec.completion_tokens == 3 and rec.finish_reason == "length"
    assert rec.reasoning_tokens == 3 and rec.first_answer_at is None and rec.ttfa is None


async def test_real_vllm_hidden_reasoning_shows_none(replay, vllm_captures):
    """``include_reasoning: false``: no thinking streamed and usage says 0: nothing to time."""
    rec = await _send(replay, (vllm_captures / "chat-stream-reasoning-hidden.txt").read_bytes())
    assert rec.ok and rec.completion_tokens == 24
    assert rec.reasoning_tokens is None and rec.first_answer_at is None and rec.ttfa == rec.ttft


# -- acceptance: a reasoning scenario against the simulator --

ACCEPTANCE = """\
name: think
seed: 5
endpoint: chat
max_concurrency: 1
schedule: {kind: constant, rate: 50, num_requests: 9}
workload:
  mix:
    - {name: deep, weight: 1, input_tokens: 30, output_tokens: 150, reasoning_effort: high}
    - {name: light, weight: 1, input_tokens: 30, output_tokens: 150, reasoning_effort: low}
    - name: plain
      weight: 1
      input_tokens: 30
      output_tokens: 150
      chat_template_kwargs: {enable_thinking: false}
"""


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http_stream"], indirect=True)
@pytest.mark.parametrize("usage", [True, False])
async def test_acceptance_time_to_first_answer_is_the_thinking_at_the_answers_itl(tmp_path, transport, usage):
    """One request at a time (the batch, so the step time, stays the same through each
    answer): the first answer comes the thinking tokens times the answer's ITL after the
    first token, within 10 %, and the thinking tokens are the simulator's: from its usage,
    or (a server that does not report them) counted with the run's tokenizer."""
    from rampwatch.loadgen.run.options import RunOptions
    from rampwatch.loadgen.run.runner import Run
    from rampwatch.loadgen.workload.scenario import load_scenario
    from rampwatch.sim.config import SimConfig
    from rampwatch.sim.reasoning import ReasoningConfig
    from rampwatch.sim.server import serve

    path = tmp_path / "think.yaml"
    path.write_text(ACCEPTANCE)
    thinking = ReasoningConfig("deepseek_r1", 24, usage_details=usage)
    config = SimConfig(hardware="h100", model="llama-3.1-8b", seed=5, reasoning=thinking)
    async with serve(config) as url:
        options = RunOptions(
            target=url, model="llama-3.1-8b", keep_records=True, scrape_interval_s=5.0, tokenizer=load_tokenizer(None)
        )
        result = await asyncio.wait_for(Run(load_scenario(str(path)), options).execute(), 60)
    records = result.requests
    assert len(records) == 9 and all(r.ok for r in records)
    by_class: dict[str, list[RequestRecord]] = {}
    for r in records:
        by_class.setdefault(r.request_class, []).append(r)
    assert set(by_class) == {"deep", "light", "plain"}
    for r in by_class["plain"]:
        assert r.reasoning_tokens is None and r.first_answer_at is None and r.ttfa == r.ttft
    for name in ("deep", "light"):
        thinking_time = thinking_tokens = answer_time = answer_gaps = 0.0
        for r in by_class[name]:
            # the simulator's count, from usage or counted: 24 x 4 (high) or 24 / 4 (low), ±50 %
            assert r.reasoning_from_usage is usage and r.completion_tokens == 150
            low, high = (48, 144) if name == "deep" else (3, 9)
            assert low <= r.reasoning_tokens <= high and r.answer_tokens == 150 - r.reasoning_tokens
            # one token a chunk: the first answer chunk follows the last thinking one
            assert r.first_answer_at == r.chunk_times[r.reasoning_tokens]
            thinking_time += r.ttfa - r.ttft
            thinking_tokens += r.reasoning_tokens
            answer_time += r.chunk_times[-1] - r.first_answer_at
            answer_gaps += r.answer_tokens - 1
        # the class's time to first answer less its TTFT is its thinking tokens at the
        # answer's ITL (summed over its requests: a few ms of a loaded machine's jitter in
        # one request's handful of gaps is not the server's)
        assert thinking_time == pytest.approx(thinking_tokens * answer_time / answer_gaps, rel=0.10)


async def test_thinking_after_the_answer_started_is_counted_not_timed(replay):
    """Interleaved thinking (between tool calls): the tokenizer counts every chunk's
    thinking text; the first answer stays the first answer."""
    events = events_of((FIXTURES / "reasoning-no-details.txt").read_bytes())
    late = events[7].replace(b'"content":" sky"', b'"reasoning":" hmm"')
    body = b"".join([*events[:8], late, *events[8:]]).replace(b'"completion_tokens":10', b'"completion_tokens":11')
    rec = await _send(replay, body, fallback_tokenizer=load_tokenizer(None))
    assert rec.ok and rec.completion_tokens == 11
    assert rec.reasoning_tokens == THINKING + 1 and rec.reasoning_from_usage is False
    assert rec.first_answer_at == pytest.approx(rec.chunk_times[FIRST_ANSWER_EVENT - 1])


@pytest.mark.parametrize("usage", [True, False])
async def test_both_spellings_in_one_chunk_are_one_thinking_text(replay, usage):
    """A server that sends the thinking in ``reasoning`` and again in
    ``reasoning_content`` (kept for older clients): the tokenizer counts it once (it
    counted it twice: 12 thinking tokens of 10, or 14 completion tokens without usage)."""
    body = re.sub(
        rb'"reasoning":("[^"]*")',
        rb'"reasoning":\1,"reasoning_content":\1',
        (FIXTURES / "reasoning-no-details.txt").read_bytes(),
    )
    rec = await _send(replay, body if usage else _without_usage(body), fallback_tokenizer=load_tokenizer(None))
    assert rec.ok, rec.error
    assert (rec.completion_tokens, rec.reasoning_tokens, rec.answer_tokens) == (10, THINKING, ANSWER)
    assert rec.reasoning_from_usage is False
