"""A misbehaving OpenAI-compatible server for the fault suite: each test sets the raw SSE
events it answers with (a real vLLM 0.32 capture by default, to be bent), on both of the
client's transports."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aiohttp import web

from rampwatch.loadgen.transport.client import StreamingClient
from rampwatch.loadgen.workload.requests import PreparedRequest

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "vllm-0.32.0-cpu"


def captured_events() -> list[bytes]:
    """The real completions stream, one ``data: …\\n\\n`` event per item."""
    body = (CAPTURES / "completions-stream.txt").read_bytes()
    return [event + b"\n\n" for event in body.split(b"\n\n") if event.strip()]


class MisbehavingServer:
    def __init__(self) -> None:
        self.events: list[bytes] = captured_events()
        self.url = ""

    async def completions(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in self.events:
            await resp.write(event)
        await resp.write_eof()
        return resp


@pytest.fixture(params=["http_stream", "aiohttp"])
def transport(request, monkeypatch) -> str:
    if request.param == "aiohttp":
        monkeypatch.setenv("RAMPWATCH_HTTP_CLIENT", "aiohttp")
    else:
        monkeypatch.delenv("RAMPWATCH_HTTP_CLIENT", raising=False)
    return request.param


async def start_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """``app`` served on a free local port: its runner (to clean up) and its origin."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # noqa: SLF001


@pytest.fixture
async def misbehaving(transport):
    server = MisbehavingServer()
    app = web.Application()
    app.router.add_post("/v1/completions", server.completions)
    runner, server.url = await start_app(app)
    yield server
    await runner.cleanup()


def make_client(url: str) -> StreamingClient:
    t0 = time.monotonic()
    return StreamingClient(url + "/v1", model="tiny", clock=lambda: time.monotonic() - t0)


def completions_request() -> PreparedRequest:
    return PreparedRequest("completions", {"prompt": "hello", "max_tokens": 8}, expected_prompt_tokens=4, max_tokens=8)
