"""Streams that are not what they should be: one event without end (a `data:` line of
megabytes), a 200 that is an HTML page, a compressed stream. The request fails saying
what came; the other requests are untouched."""

from __future__ import annotations

import asyncio
import gzip
import time

import pytest
from aiohttp import web

from rampwatch.loadgen.transport import sse
from tests.faults.conftest import captured_events, completions_request, make_client, start_app

MIB = 1024 * 1024


class ShapedServer:
    """Answers each completion with what ``shape`` (the prompt) asks for."""

    def __init__(self) -> None:
        self.url = ""
        self.accept_encoding: list[str | None] = []
        self.release = asyncio.Event()  # a stream that never ends waits on this

    async def completions(self, request: web.Request) -> web.StreamResponse:
        shape = (await request.json())["prompt"]
        self.accept_encoding.append(request.headers.get("Accept-Encoding"))
        if shape == "html":
            return web.Response(text="<html><body><h1>Gateway login</h1></body></html>", content_type="text/html")
        headers = {"Content-Type": "text/event-stream"}
        if shape == "gzip":
            headers["Content-Encoding"] = "gzip"
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        if shape == "gzip":
            await resp.write(gzip.compress(b"".join(captured_events())))
        elif shape == "endless line":
            await resp.write(b"data: ")
            piece = b"x" * 65536
            for _ in range(4 * MIB // len(piece)):
                await resp.write(piece)
            await self.release.wait()
        else:
            for event in captured_events():
                await resp.write(event)
        await resp.write_eof()
        return resp


@pytest.fixture
async def shaped(transport):
    server = ShapedServer()
    app = web.Application()
    app.router.add_post("/v1/completions", server.completions)
    runner, server.url = await start_app(app)
    yield server
    server.release.set()
    await runner.cleanup()


def request(shape: str):
    req = completions_request()
    return type(req)(req.endpoint, {**req.payload, "prompt": shape}, req.expected_prompt_tokens, req.max_tokens)


async def test_an_event_past_the_cap_fails_its_request_naming_the_cap_and_the_others_finish(shaped, monkeypatch):
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 1 * MIB)
    client = make_client(shaped.url)
    client.request_timeout_s = 60.0
    await client.start()
    try:
        records = await asyncio.gather(
            client.send(request("endless line"), 0, 0.0),
            *(client.send(request("normal"), i, 0.0) for i in range(1, 6)),
        )
    finally:
        await client.close()
    endless, *others = records
    assert endless.error_class == "stream_error"  # not a timeout: the server never ends that body
    assert endless.error == "a stream event passed 1 MiB, the most rampwatch reads of one event"
    assert all(r.error_class is None and r.completion_tokens == 8 for r in others), others


def test_a_line_over_many_reads_costs_work_in_proportion_to_its_length():
    decoder = sse.SSEDecoder(max_event_bytes=64 * MIB)
    piece = b"x" * 65536
    started = time.process_time()
    assert decoder.feed(b"data: ") == []
    for _ in range(32 * MIB // len(piece)):
        assert decoder.feed(piece) == []
    (event,) = decoder.feed(b"\n\n")
    # a copy of the buffer at every read (the old decoder) took ~30 s of CPU here
    assert time.process_time() - started < 5.0
    assert len(event) == 32 * MIB


@pytest.mark.parametrize("lines", [[b"data: " + b"y" * 700], [b"data: " + b"y" * 300] * 3])
def test_an_event_of_many_lines_or_one_long_line_is_capped(lines):
    decoder = sse.SSEDecoder(max_event_bytes=1000)
    with pytest.raises(sse.EventTooLarge, match="passed 0.000953674 MiB"):
        for line in lines:
            decoder.feed(line[:200])
            decoder.feed(line[200:] + b"\n")
        decoder.feed(b"data: " + b"z" * 400)


@pytest.mark.parametrize(
    "shape, error",
    [
        (
            "html",
            "HTTP 200 with text/html, not an event stream: '<html><body><h1>Gateway login</h1></body></html>'",
        ),
        ("gzip", "the stream came gzip-encoded (rampwatch asks for identity and does not decode it); no [DONE] read"),
    ],
)
async def test_a_200_that_is_not_a_plain_event_stream_fails_saying_what_came(shaped, shape, error):
    client = make_client(shaped.url)
    await client.start()
    try:
        rec = await client.send(request(shape), 0, 0.0)
    finally:
        await client.close()
    assert (rec.status, rec.error_class, rec.error) == (200, "stream_aborted", error)
    assert shaped.accept_encoding == ["identity"]
