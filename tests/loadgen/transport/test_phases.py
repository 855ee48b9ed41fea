"""Where TTFT goes: both transports mark a request's phases against a local server (and
aiohttp over TLS), and the phases add up to the TTFT."""

import asyncio
import time

import pytest
from aiohttp import web

from rampwatch.core.figures.phases import record_phases
from rampwatch.loadgen.transport.client import StreamingClient
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.workload.requests import PreparedRequest
from tests.faults.test_connection_options import make_cert, tls_context

HEAD_DELAY = 0.05  # before the response's headers: a front end, a gateway's queue
TOKEN_DELAY = 0.08  # from the headers to the first token: the engine's queue
TOKEN = b'data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}\n\n'


async def handle(request: web.Request) -> web.StreamResponse:
    await request.read()
    await asyncio.sleep(HEAD_DELAY)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await asyncio.sleep(TOKEN_DELAY)
    for event in (TOKEN, TOKEN, USAGE, b"data: [DONE]\n\n"):
        await resp.write(event)
    await resp.write_eof()
    return resp


async def start_server(tls=None):
    app = web.Application()
    app.router.add_post("/v1/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"{'https' if tls else 'http'}://127.0.0.1:{port}"


def request():
    return PreparedRequest("completions", {"prompt": "hi", "max_tokens": 2}, 3, 2)


def check_phases(rec, new_connection: bool, waited: bool):
    assert rec.ok, rec.error
    phases = record_phases(rec)
    assert phases is not None
    # the acceptance: the breakdown adds up to the TTFT, within 1 ms
    assert sum(phases.values()) == pytest.approx(rec.ttft, abs=1e-3)
    assert all(v >= 0 for v in phases.values())
    assert phases["headers"] >= HEAD_DELAY * 0.9
    assert phases["first_token"] >= TOKEN_DELAY * 0.9
    assert rec.request_sent_at is not None and rec.headers_at is not None
    assert (rec.connected_at is not None) == new_connection
    assert (rec.slot_at is not None) == waited
    if waited:
        assert phases["slot"] >= (HEAD_DELAY + TOKEN_DELAY) * 0.9


@pytest.mark.parametrize("transport", ["http_stream", "aiohttp"])
async def test_phases_add_up_to_the_ttft_on_both_transports(transport, monkeypatch):
    if transport == "aiohttp":
        monkeypatch.setenv("RAMPWATCH_HTTP_CLIENT", "aiohttp")
    else:
        monkeypatch.delenv("RAMPWATCH_HTTP_CLIENT", raising=False)
    runner, url = await start_server()
    t0 = time.monotonic()
    try:
        async with StreamingClient(url + "/v1", "tiny", connection_limit=1, clock=lambda: time.monotonic() - t0) as c:
            assert c.transport == transport
            first = await c.send(request(), 0, c.clock())
            check_phases(first, new_connection=True, waited=False)
            second = await c.send(request(), 1, c.clock())  # the same connection, kept alive
            check_phases(second, new_connection=False, waited=False)
            # two at once on one connection: the second waits for the first's slot
            both = await asyncio.gather(c.send(request(), 2, c.clock()), c.send(request(), 3, c.clock()))
            waits = sorted(r.slot_at is not None for r in both)
            assert waits == [False, True]
            for rec in both:
                check_phases(rec, new_connection=rec.connected_at is not None, waited=rec.slot_at is not None)
    finally:
        await runner.cleanup()


@pytest.mark.slow  # openssl makes the certificate
async def test_phases_over_tls_on_aiohttp(tmp_path):
    cert = make_cert(tmp_path)
    runner, url = await start_server(tls_context(cert))
    try:
        connection = Connection(ca_cert=str(cert[0]))
        async with StreamingClient(url + "/v1", "tiny", connection=connection) as client:
            assert client.transport == "aiohttp"
            rec = await client.send(request(), 0, client.clock())
    finally:
        await runner.cleanup()
    check_phases(rec, new_connection=True, waited=False)
    assert record_phases(rec)["connect"] > 0  # the TLS handshake is in it


async def handle_500(request: web.Request) -> web.Response:
    await request.read()
    await asyncio.sleep(HEAD_DELAY)
    return web.Response(status=500, text="engine down")


@pytest.mark.parametrize("transport", ["http_stream", "aiohttp"])
async def test_a_request_failed_at_its_headers_keeps_the_phases_it_reached(transport, monkeypatch):
    if transport == "aiohttp":
        monkeypatch.setenv("RAMPWATCH_HTTP_CLIENT", "aiohttp")
    else:
        monkeypatch.delenv("RAMPWATCH_HTTP_CLIENT", raising=False)
    app = web.Application()
    app.router.add_post("/v1/completions", handle_500)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    t0 = time.monotonic()
    try:
        async with StreamingClient(url + "/v1", "tiny", clock=lambda: time.monotonic() - t0) as c:
            assert c.transport == transport
            rec = await c.send(request(), 0, c.clock())
    finally:
        await runner.cleanup()
    assert not rec.ok and rec.first_token_at is None
    phases = record_phases(rec)
    assert phases is not None and "first_token" not in phases
    assert rec.connected_at is not None and rec.headers_at is not None
    assert phases["headers"] >= HEAD_DELAY * 0.9  # the wait for the 500's head
    assert rec.sent_at + sum(phases.values()) == pytest.approx(rec.headers_at, abs=1e-6)
