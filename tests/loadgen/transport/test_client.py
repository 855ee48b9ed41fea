"""The streaming client against small servers replaying real vLLM captures.

Every test runs on both transports (``loadgen.transport.http_stream`` and aiohttp): the records
must come out the same.
"""

import asyncio
import json
import os
import random
import socket
import time

import pytest
from aiohttp import web

from rampwatch.core.errors import TargetUnreachable
from rampwatch.core.figures.stats import itl_array
from rampwatch.loadgen.transport.client import RequestCancelled, StreamingClient, count_tokens
from rampwatch.loadgen.transport.server_probe import check_reachable, fetch_server_info
from rampwatch.loadgen.transport.stream_state import cached_prompt_tokens
from rampwatch.loadgen.workload.requests import PreparedRequest

SECRET = "sk-test-secret-123"


@pytest.fixture(params=["http_stream", "aiohttp"], autouse=True)
def transport(request, monkeypatch):
    if request.param == "aiohttp":
        monkeypatch.setenv("RAMPWATCH_HTTP_CLIENT", "aiohttp")
    else:
        monkeypatch.delenv("RAMPWATCH_HTTP_CLIENT", raising=False)
    return request.param


def events_of(body: bytes) -> list[bytes]:
    return [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]


class Replay:
    """Serves a recorded SSE body event by event, with pauses and odd network splits."""

    def __init__(self, vllm_captures):
        self.completions = (vllm_captures / "completions-stream.txt").read_bytes()
        self.chat = (vllm_captures / "chat-stream.txt").read_bytes()
        self.too_long = (vllm_captures / "error-too-long.json").read_bytes()
        self.mode = "normal"
        self.first_delay = 0.05
        self.gap = 0.01
        self.split = 0  # >0: write each event in pieces of this many bytes
        self.crlf = False
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        self.auth.append(request.headers.get("Authorization"))
        if self.mode == "http500":
            return web.Response(status=500, text="Internal Server Error")
        if self.mode == "http400":
            return web.Response(status=400, body=self.too_long, content_type="application/json")
        if self.mode == "echo_key":
            msg = {"error": {"message": f"bad key {request.headers.get('Authorization')}", "code": 401}}
            return web.json_response(msg, status=401)
        if self.mode == "hang":
            await asyncio.wait_for(self.release.wait(), 5)
        source = self.chat if request.path.endswith("/chat/completions") else self.completions
        events = events_of(source)
        if self.mode == "no_usage":
            events = [e for e in events if b'"choices":[]' not in e]
        if self.mode == "no_done":
            events = [e for e in events if b"[DONE]" not in e]
        if self.mode == "stream_error":
            events = events[:2] + [
                b'data: {"error":{"message":"engine died","type":"InternalServerError","code":500}}\n\n'
            ]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(self.first_delay)
        for i, event in enumerate(events):
            if self.crlf:
                event = event.replace(b"\n", b"\r\n")
            if self.mode == "abort" and i == 3:
                request.transport.close()
                return resp
            if self.split:
                for pos in range(0, len(event), self.split):
                    await resp.write(event[pos : pos + self.split])
            else:
                await resp.write(event)
            await asyncio.sleep(self.gap)
        await resp.write_eof()
        return resp


@pytest.fixture
async def server(vllm_captures):
    replay = Replay(vllm_captures)
    app = web.Application()
    app.router.add_post("/v1/completions", replay.handle)
    app.router.add_post("/v1/chat/completions", replay.handle)
    metrics_text = (vllm_captures / "metrics.txt").read_text()

    async def models(request):
        return web.json_response({"data": [{"id": "tiny", "root": "tiny"}]})

    async def metrics(request):
        return web.Response(text=metrics_text)

    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    replay.url = f"http://127.0.0.1:{port}"
    yield replay
    replay.release.set()
    await runner.cleanup()


def completions_req(**payload):
    return PreparedRequest(
        "completions", {"prompt": "hello", "max_tokens": 8, **payload}, expected_prompt_tokens=3, max_tokens=8, tag="t1"
    )


def chat_req():
    return PreparedRequest("chat", {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4}, 20, 4)


def make_client(url, **kw):
    t0 = time.monotonic()
    client = StreamingClient(url + "/v1", model="tiny", clock=lambda: time.monotonic() - t0, **kw)
    expected = "aiohttp" if os.environ.get("RAMPWATCH_HTTP_CLIENT") == "aiohttp" else "http_stream"
    assert client.transport == expected
    return client


@pytest.mark.parametrize("split, crlf", [(0, False), (7, False), (3, True)])
async def test_completions_tokens_from_usage_and_timing(server, split, crlf):
    server.split, server.crlf = split, crlf
    async with make_client(server.url) as client:
        rec = await client.send(completions_req(), request_id=7, scheduled_at=0.0)
    assert rec.ok, rec.error
    assert (rec.id, rec.status, rec.scenario_tag) == (7, 200, "t1")
    # usage says 8 tokens; the capture has 10 data events, 8 with choices (2 of them empty text)
    assert rec.completion_tokens == 8 and rec.prompt_tokens == 4 and rec.tokens_from_usage
    assert rec.finish_reason == "length"
    # every chunk with non-empty choices is a token chunk, as in `vllm bench serve`
    assert len(rec.chunk_times) == 7 and len(itl_array(rec)) == 7
    assert rec.ttft >= server.first_delay * 0.9
    assert all(itl >= server.gap * 0.5 for itl in itl_array(rec))
    assert rec.end_at == rec.chunk_times[-1]  # the usage chunk and [DONE] do not extend E2E
    assert rec.tpot == pytest.approx((rec.e2e - rec.ttft) / 7)
    assert rec.sent_at >= rec.scheduled_at


async def test_chat_role_chunk_counts_as_first_token(server):
    async with make_client(server.url) as client:
        rec = await client.send(chat_req(), 1, 0.0)
    assert rec.ok, rec.error
    assert rec.completion_tokens == 4 and rec.prompt_tokens == 21
    # role-only chunk + 4 content chunks (one empty): TTFT at the role chunk, 4 ITLs
    assert len(rec.chunk_times) == 4
    assert rec.finish_reason == "length"


async def test_request_body_and_auth_header(server):
    async with make_client(server.url, api_key=SECRET) as client:
        await client.send(completions_req(temperature=0), 1, 0.0)
        assert SECRET not in repr(client)
    body = server.bodies[0]
    assert body["model"] == "tiny" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["prompt"] == "hello" and body["temperature"] == 0
    assert server.auth == [f"Bearer {SECRET}"]


async def test_http_400_carries_vllm_message(server):
    server.mode = "http400"
    async with make_client(server.url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "http_400" and rec.status == 400
    assert rec.error.startswith("max_tokens=5000 cannot be greater than max_model_len=2048")
    assert rec.first_token_at is None and rec.end_at >= rec.sent_at


async def test_http_500(server):
    server.mode = "http500"
    async with make_client(server.url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "http_500" and "Internal Server Error" in rec.error


async def test_api_key_never_reaches_the_record(server):
    server.mode = "echo_key"
    async with make_client(server.url, api_key=SECRET) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "http_401"
    assert SECRET not in json.dumps(rec.to_dict()) and "<redacted>" in rec.error


async def test_abort_mid_stream(server):
    server.mode = "abort"
    async with make_client(server.url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "stream_aborted", rec.error
    assert rec.first_token_at is not None and rec.status == 200


async def test_eof_without_done_is_an_abort(server):
    server.mode = "no_done"
    async with make_client(server.url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "stream_aborted" and "[DONE]" in rec.error
    assert rec.completion_tokens == 8  # the usage chunk still arrived


async def test_error_event_inside_stream(server):
    server.mode = "stream_error"
    async with make_client(server.url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "stream_error" and rec.error == "engine died"


async def test_timeout(server):
    server.mode = "hang"
    async with make_client(server.url, request_timeout_s=0.3) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "timeout"
    assert 0.25 <= rec.e2e < 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_connection_refused():
    url = f"http://127.0.0.1:{free_port()}"
    async with make_client(url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.error_class == "connect" and rec.status is None
    with pytest.raises(TargetUnreachable, match=r"cannot reach http://127\.0\.0\.1:\d+ : "):
        await check_reachable(url, timeout_s=2)
    info = await fetch_server_info(url, timeout_s=1)
    assert info["models"] == [] and set(info["errors"]) == {"/v1/models", "/version", "/metrics"}


async def test_cancel_record_caught_inside_task(server):
    """The cancelled request's record reaches the caller; the client keeps working."""
    server.mode = "hang"
    seen = []

    async with make_client(server.url) as client:

        async def one():
            try:
                return await client.send(completions_req(), 5, 0.0)
            except RequestCancelled as cancelled:
                seen.append(cancelled.record)
                raise

        task = asyncio.create_task(one())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        server.mode = "normal"
        after = await client.send(completions_req(), 6, 0.0)
    assert seen[0].error_class == "cancelled" and seen[0].id == 5
    assert after.ok and len(after.chunk_times) == 7


async def test_fallback_tokenizer_without_usage(server):
    server.mode = "no_usage"
    words = lambda text: len(text)  # noqa: E731 - a character "tokenizer" makes the count checkable
    async with make_client(server.url, fallback_tokenizer=words) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.ok and not rec.tokens_from_usage
    # the streamed texts: "ck","23","\x1f","","\ufffde","87","","\ufffd#"
    assert rec.completion_tokens == len("ck23\x1f\ufffde87\ufffd#")
    assert rec.prompt_tokens == 3  # falls back to the request's expected prompt tokens


async def test_no_usage_no_tokenizer_counts_nothing(server):
    server.mode = "no_usage"
    async with make_client(server.url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert rec.ok and not rec.tokens_from_usage and rec.completion_tokens == 0


@pytest.mark.parametrize("mode", ["normal", "no_usage"])
async def test_generated_text_kept_only_when_asked(server, mode):
    server.mode = mode
    async with make_client(server.url, fallback_tokenizer=len) as client:
        plain = await client.send(completions_req(), 1, 0.0)
    async with make_client(server.url, keep_generated_text=True) as client:
        kept = await client.send(completions_req(), 2, 0.0)
    assert plain.ok and kept.ok
    assert plain.generated_text is None  # decoded for the count only (no_usage), never kept
    assert kept.generated_text == "ck23\x1f\ufffde87\ufffd#"  # the streamed texts, joined


async def test_a_request_can_ask_to_keep_its_answer(server):
    """A session's next turn carries the answer: the request alone asks for its text."""
    request = completions_req()
    request.keep_text, request.session, request.turn, request.request_class = True, 7, 2, "chat"
    async with make_client(server.url) as client:
        rec = await client.send(request, 1, 0.0)
    assert rec.ok and rec.generated_text == "ck23\x1f\ufffde87\ufffd#"
    assert (rec.session, rec.turn, rec.request_class) == (7, 2, "chat")


@pytest.mark.parametrize(
    "usage, cached",
    [
        ({"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": 32}}, 32),
        ({"prompt_tokens": 40, "prompt_tokens_details": None}, None),
        ({"prompt_tokens": 40}, None),
        ({"prompt_tokens": 40, "prompt_tokens_details": {"cached_tokens": -1}}, None),
    ],
)
def test_cached_prompt_tokens(usage, cached):
    assert cached_prompt_tokens(usage) == cached


async def test_server_info(server):
    async with make_client(server.url) as client:
        assert await client.check_reachable() == 200
        info = await client.fetch_server_info()
    assert info["models"][0]["id"] == "tiny"
    assert info["cache_config"]["block_size"] == "128" and info["cache_config"]["num_gpu_blocks"] == "4096"
    assert "/version" in info["errors"]


def test_count_tokens_adapters():
    class HF:
        def encode(self, text, add_special_tokens=True):
            return text.split() + ([] if not add_special_tokens else ["<s>"])

    assert count_tokens(HF(), "a b c") == 3
    assert count_tokens(lambda t: 42, "x") == 42
    assert count_tokens(HF(), "") == 0


async def test_end_to_end_against_the_simulator():
    """Client, poller, series builder and summary on the simulated vLLM server."""
    from rampwatch.core.figures.series import SeriesBuilder
    from rampwatch.core.figures.summary import summarise_requests
    from rampwatch.loadgen.server.scrape import MetricsPoller
    from rampwatch.sim.config import SimConfig
    from rampwatch.sim.server import serve

    async with serve(SimConfig(hardware="instant", model="tiny", seed=3, engines=2), port=0) as url:
        t0 = time.monotonic()
        clock = lambda: time.monotonic() - t0  # noqa: E731
        builder, samples = SeriesBuilder(), []

        # The second scrape read after the last answer was asked for after it (the poller
        # asks for one page after another): its totals count every token.
        answered: list[float] = []
        scraped_after_the_answers = asyncio.Event()

        def on_sample(sample):
            samples.append(sample)
            builder.on_scrape(sample)
            if answered and len([s for s in samples if s.ok and s.t >= answered[0]]) >= 2:
                scraped_after_the_answers.set()

        async with StreamingClient(url, model="placeholder", clock=clock) as client:
            info = await client.fetch_server_info()
            client.model = info["models"][0]["id"]
            poller = MetricsPoller([url + "/metrics"], interval_s=0.1, clock=clock, on_sample=on_sample)
            poll_task = asyncio.create_task(poller.run())
            reqs = [completions_req(ignore_eos=True) if i % 2 else chat_req() for i in range(6)]
            records = await asyncio.gather(*(client.send(r, i, clock()) for i, r in enumerate(reqs)))
            answered.append(clock())
            await asyncio.wait_for(scraped_after_the_answers.wait(), 30)  # ~0.2 s unless the machine is loaded
            poll_task.cancel()
            await asyncio.gather(poll_task, return_exceptions=True)
    for r in records:
        assert r.ok, (r.error_class, r.error)
        assert r.tokens_from_usage and r.completion_tokens >= 1
        builder.on_request(r)
    good = [s for s in samples if s.ok]
    assert good and good[-1].backend == "vllm" and set(good[-1].per_engine) == {"0", "1"}
    generated = sum(r.completion_tokens for r in records)
    assert good[-1].generation_tokens_total >= generated
    summary = summarise_requests(None, records, samples, [], duration_s=clock())
    assert summary.completed == 6 and summary.total_output_tokens == generated
    assert builder.snapshot().summary["completed"] == 6


# -- a raw HTTP/1.1 server: chunk framing split anywhere, keep-alive control ------------


def chunked_wire(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


def awkward_cuts(wire: bytes, seed: int) -> list[int]:
    """Cut points inside chunk-size lines, between CR and LF, and inside SSE events."""
    rng, cuts, pos = random.Random(seed), set(), 0
    while pos < len(wire):
        nl = wire.index(b"\r\n", pos)
        size = int(wire[pos:nl], 16)
        if nl - pos >= 2:
            cuts.add(pos + 1)  # inside the size line
        cuts.add(nl + 1)  # between its CR and LF
        if size:
            cuts.add(nl + 2 + rng.randint(1, size - 1))  # inside the event
            cuts.add(nl + 2 + size + 1)  # between the chunk's closing CR and LF
        pos = nl + 2 + size + 2 if size else len(wire)
    return sorted(c for c in cuts if 0 < c < len(wire))


class RawServer:
    """Answers each request on a connection with a hand-written response, written in pieces."""

    def __init__(self, vllm_captures):
        self.completions = (vllm_captures / "completions-stream.txt").read_bytes()
        self.too_long = (vllm_captures / "error-too-long.json").read_bytes()
        self.mode = "chunked"
        self.seed = 0
        self.close_after_response = False  # without saying so in a header
        self.connection_close_header = False
        self.connections = 0
        self.requests = 0

    def response(self) -> tuple[bytes, list[int]]:
        close = b"Connection: close\r\n" if self.connection_close_header else b""
        if self.mode == "error_400":
            head = b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n"
            wire = head % (close, len(self.too_long)) + self.too_long
            return wire, [17, len(wire) - 20]
        if self.mode == "content_length":
            head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%sContent-Length: %d\r\n\r\n"
            wire = head % (close, len(self.completions)) + self.completions
            return wire, list(range(30, len(wire), 53))
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n%sTransfer-Encoding: chunked\r\n\r\n" % close
        body = chunked_wire(events_of(self.completions))
        return head + body, [5, len(head) - 1] + [len(head) + c for c in awkward_cuts(body, self.seed)]

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.requests += 1
                wire, cuts = self.response()
                pos = 0
                for cut in [*cuts, len(wire)]:
                    writer.write(wire[pos:cut])
                    await writer.drain()
                    await asyncio.sleep(0.001)
                    pos = cut
                if self.close_after_response or self.connection_close_header:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@pytest.fixture
async def raw_server(vllm_captures):
    raw = RawServer(vllm_captures)
    server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
    raw.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield raw
    server.close()


def assert_capture_record(rec):
    assert rec.ok, (rec.error_class, rec.error)
    assert rec.completion_tokens == 8 and rec.prompt_tokens == 4 and rec.finish_reason == "length"
    assert len(rec.chunk_times) == 7 and rec.end_at == rec.chunk_times[-1]


@pytest.mark.parametrize("seed", range(4))
async def test_chunk_framing_split_anywhere(raw_server, seed):
    raw_server.seed = seed
    async with make_client(raw_server.url) as client:
        rec = await client.send(completions_req(), 1, 0.0)
    assert_capture_record(rec)


async def test_content_length_stream_and_error_body(raw_server):
    raw_server.mode = "content_length"
    async with make_client(raw_server.url) as client:
        assert_capture_record(await client.send(completions_req(), 1, 0.0))
        raw_server.mode = "error_400"
        rec = await client.send(completions_req(), 2, 0.0)
    assert rec.error_class == "http_400" and rec.error.startswith("max_tokens=5000 cannot be greater")


async def test_keep_alive_reuse_across_sequential_requests(raw_server, transport):
    async with make_client(raw_server.url) as client:
        for i, mode in enumerate(["chunked", "content_length", "error_400", "chunked"]):
            raw_server.mode = mode
            rec = await client.send(completions_req(), i, 0.0)
            if mode == "error_400":
                assert rec.error_class == "http_400"
            else:
                assert_capture_record(rec)
    assert raw_server.requests == 4
    if transport == "http_stream":  # aiohttp closes a connection whose body it left unread
        assert raw_server.connections == 1


@pytest.mark.parametrize("how", ["header", "silent"])
async def test_server_closing_keep_alive_connections(raw_server, how):
    if how == "header":
        raw_server.connection_close_header = True
    else:
        raw_server.close_after_response = True
    async with make_client(raw_server.url) as client:
        for i in range(3):
            assert_capture_record(await client.send(completions_req(), i, 0.0))
            await asyncio.sleep(0.05)
    assert raw_server.requests == 3 and raw_server.connections == 3


async def test_concurrent_requests_within_the_connection_limit(raw_server, transport):
    async with make_client(raw_server.url, connection_limit=3) as client:
        records = await asyncio.gather(*(client.send(completions_req(), i, 0.0) for i in range(8)))
    for rec in records:
        assert_capture_record(rec)
    assert raw_server.requests == 8
    if transport == "http_stream":
        assert raw_server.connections <= 3


# -- the fast path for whole token events gives the record the event-by-event path gives --


def _exchange_record(wire_reads: list[bytes], fast: bool, keep_text: bool, monkeypatch):
    from rampwatch.core.timeline import RequestRecord
    from rampwatch.loadgen.transport import sse, stream_state

    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(sse.SSEDecoder, "token_events_only", lambda self, data: 0)
        return _feed_exchange(stream_state, RequestRecord, wire_reads, keep_text)


def _feed_exchange(stream_state, RequestRecord, wire_reads, keep_text):
    ticks = iter(range(1, 1000))
    rec = RequestRecord(id=1, scheduled_at=0.0, sent_at=0.0, end_at=0.0, prompt_tokens=3)
    state = stream_state.StreamState(keep_text=keep_text)
    loop = asyncio.new_event_loop()
    try:
        exchange = stream_state.StreamExchange(rec, state, lambda: float(next(ticks)), loop.create_future())
        exchange.on_head(200, "OK", {})
        for read in wire_reads:
            exchange.on_body([read])
        assert exchange.finished.done()
        state.settle_fast_reads(rec)  # as StreamingClient._finish does
    finally:
        loop.close()
    return rec, state


@pytest.mark.parametrize("group", [1, 2, 3, 5])
@pytest.mark.parametrize("keep_text", [False, True])
def test_fast_token_path_matches_event_by_event(vllm_captures, group, keep_text, monkeypatch):
    body = (vllm_captures / "completions-stream.txt").read_bytes()
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]
    reads = [b"".join(events[i : i + group]) for i in range(0, len(events), group)]
    fast_rec, fast_state = _exchange_record(reads, True, keep_text, monkeypatch)
    slow_rec, slow_state = _exchange_record(reads, False, keep_text, monkeypatch)
    assert fast_rec.first_token_at == slow_rec.first_token_at is not None
    assert list(fast_rec.chunk_times) == list(slow_rec.chunk_times) and len(fast_rec.chunk_times) == 7
    assert fast_rec.finish_reason == slow_rec.finish_reason == "length"
    assert fast_state.usage == slow_state.usage and fast_state.usage["completion_tokens"] == 8
    assert fast_state.done and slow_state.done
    if keep_text:
        assert fast_state.text() == slow_state.text() == "ck23\x1f\ufffde87\ufffd#"


def _token(i: int, finish: str | None = None, usage: bool = True) -> bytes:
    reason = f'"{finish}"' if finish else "null"
    tail = f',"usage":{{"prompt_tokens":4,"completion_tokens":{i}}}' if usage else ""
    return f'data: {{"choices":[{{"index":0,"text":"a","finish_reason":{reason}}}]{tail}}}\n\n'.encode()


@pytest.mark.parametrize("final_usage_chunk", [True, False])
@pytest.mark.parametrize("group", [1, 2])
def test_fast_path_finish_reason_and_usage_in_token_chunks(final_usage_chunk, group, monkeypatch):
    events = [_token(1), _token(2), _token(3, finish="stop")]
    if final_usage_chunk:  # continuous usage stats, then the final usage chunk says 30
        events.append(b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":30}}\n\n')
    events.append(b"data: [DONE]\n\n")
    reads = [b"".join(events[i : i + group]) for i in range(0, len(events), group)]
    for fast in (True, False):
        rec, state = _exchange_record(reads, fast, False, monkeypatch)
        assert rec.finish_reason == "stop" and len(rec.chunk_times) == 2
        assert state.usage["completion_tokens"] == (30 if final_usage_chunk else 3)


async def test_first_model_and_its_one_line_errors(server):
    from rampwatch.loadgen.transport.server_probe import first_model, probe_models

    assert await first_model(server.url) == "tiny"
    answer = await probe_models(server.url)
    assert answer.status == 200 and answer.url == server.url.rstrip("/") + "/v1/models"
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TargetUnreachable, match=rf"^cannot reach {url} : "):
        await first_model(url, timeout_s=2)


# -- the body: a payload encoded in the builder process is spliced, byte for byte


def _requests_of(endpoint: str, images: dict | None = None, **workload) -> list[PreparedRequest]:
    from rampwatch.loadgen.workload.request_factory import RequestFactory
    from rampwatch.loadgen.workload.scenario import validate_scenario

    spec = {"input_tokens": 24, "output_tokens": 8, "system_prompt": {"tokens": 10}, **workload}
    if images is not None:
        spec["images"] = images
    data = {"endpoint": endpoint, "seed": 5, "schedule": {"kind": "constant", "rate": 1, "num_requests": 4}}
    factory = RequestFactory(validate_scenario({**data, "workload": spec}, "x.yaml"), cache_salt="salt-1")
    return [factory.next_request() for _ in range(3)]


@pytest.mark.parametrize(
    "requests",
    [
        pytest.param(lambda: _requests_of("chat"), id="chat text"),
        pytest.param(lambda: _requests_of("completions"), id="completions text"),
        pytest.param(lambda: _requests_of("completions", prompt_format="token_ids"), id="token ids"),
        pytest.param(
            lambda: _requests_of("chat", extra_body={"temperature": 0.5, "chat_template_kwargs": {"x": "é"}}),
            id="extra body",
        ),
        pytest.param(lambda: _requests_of("chat", {"count": 2, "width": 8, "height": 6}), id="images"),
        pytest.param(
            lambda: _requests_of("chat", {"count": 1, "width": 4, "height": 4}, adapters=[{"name": "sql-lora"}]),
            id="images and an adapter",
        ),
        pytest.param(lambda: _requests_of("chat", adapters=[{"name": "a"}, {"name": "b"}]), id="text and adapters"),
    ],
)
def test_an_encoded_payload_gives_the_same_body_byte_for_byte(requests):
    import pickle

    from rampwatch.loadgen.transport.client import _body_bytes
    from rampwatch.loadgen.workload.encoded_payload import EncodedPayload, encode_payload
    from rampwatch.loadgen.workload.requests_ahead import _request_frame, _unframed

    client = StreamingClient("http://127.0.0.1:9", "the-model")
    for request in requests():
        before = _body_bytes(client.build_body(request))  # the body as it was sent
        # as the builder process sends it (short ones too, which it would not encode)
        encoded = pickle.loads(pickle.dumps(request))
        encoded.payload = encode_payload(encoded.payload)
        tag, parts = _request_frame(encoded)
        travelled = _unframed(memoryview(bytearray(b"".join(parts))))
        assert tag == b"B" and isinstance(travelled.payload, EncodedPayload)
        assert client.body_bytes(travelled) == before
        assert client.body_bytes(request) == before  # a dict payload: as before
        assert client.build_body(travelled) == client.build_body(request)  # the aiohttp path's
        assert before.startswith(b'{"model":"' + (request.adapter or "the-model").encode() + b'"')


@pytest.mark.parametrize("payload", [{}, {"prompt": "x", "max_tokens": 2}])
def test_an_encoded_payload_the_model_name_cannot_be_encoded_by_orjson_goes_the_usual_way(payload):
    from rampwatch.loadgen.transport.client import _body_bytes
    from rampwatch.loadgen.workload.encoded_payload import encode_payload

    client = StreamingClient("http://127.0.0.1:9", "odd-\ud800-model")
    request = PreparedRequest("completions", payload, 1, 2)
    encoded = PreparedRequest("completions", encode_payload(payload), 1, 2)  # type: ignore[arg-type]
    assert client.body_bytes(encoded) == client.body_bytes(request) == _body_bytes(client.build_body(request))
    assert b"\\ud800" in client.body_bytes(encoded)  # json's escape: orjson refused it
