"""Redirects (issue 26, item 2): a server that redirects `POST /v1/completions` (307) and
`GET /metrics` (302) to a listener on another port. rampwatch follows a redirect only
within the server's origin; one to another origin is refused, so the listener never gets a
`--header` value, the API key or a prompt. The request fails as `http_307`, naming where it
was sent; the run goes on and says so once in its events."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from rampwatch.core.errors import UserError
from rampwatch.loadgen.server.scrape import MetricsPoller
from rampwatch.loadgen.transport.client import StreamingClient
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.transport.server_probe import probe_models
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import SimServer
from tests.faults.conftest import completions_request, start_app

REPO = Path(__file__).resolve().parents[2]
TOKEN = "gw-redirect-5e1d9a-secret"
API_KEY = "sk-redirect-7c2b4f"


class RedirectingServer:
    """The simulator whose `/v1/completions` answers 307 and `/metrics` 302, either to a
    listener on another port (`cross=True`) or to the same path on itself (with `?moved=1`,
    then served); the listener keeps every request it gets (method, path, headers, body)."""

    def __init__(self, *, cross: bool) -> None:
        self.cross = cross
        self.url = ""
        self.listener_url = ""
        self.received: list[tuple[str, str, dict[str, str], bytes]] = []
        self.redirected = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _listen(self, request: web.Request) -> web.Response:
        self.received.append((request.method, request.path, dict(request.headers), await request.read()))
        return web.json_response({"data": [{"id": "tiny"}]})

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        listener = web.Application()
        listener.router.add_route("*", "/{tail:.*}", self._listen)
        listener_runner = web.AppRunner(listener, access_log=None, handle_signals=False)
        await listener_runner.setup()
        listener_site = web.TCPSite(listener_runner, "127.0.0.1", 0)
        await listener_site.start()
        self.listener_url = f"http://127.0.0.1:{listener_site._server.sockets[0].getsockname()[1]}"  # noqa: SLF001

        server = SimServer(SimConfig(hardware="instant", model="tiny"))
        app = server.app()

        @web.middleware
        async def redirect(request: web.Request, handler):
            status = {"/v1/completions": 307, "/metrics": 302}.get(request.path)
            if status is None or "moved" in request.query:
                return await handler(request)
            self.redirected += 1
            where = self.listener_url + request.path if self.cross else request.path + "?moved=1"
            return web.Response(status=status, headers={"Location": where})

        app.middlewares.append(redirect)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # noqa: SLF001
        server.start_drivers()
        self._ready.set()
        await self._stop.wait()
        await server.stop_drivers()
        await runner.cleanup()
        await listener_runner.cleanup()

    def __enter__(self) -> RedirectingServer:
        self._thread.start()
        assert self._ready.wait(10), "the server did not start"
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


CONNECTION = Connection(api_key=API_KEY, headers=(("X-Gateway-Token", TOKEN),))


def client_for(url: str) -> StreamingClient:
    t0 = time.monotonic()
    return StreamingClient(url, model="tiny", connection=CONNECTION, clock=lambda: time.monotonic() - t0)


async def request_and_scrape(server: RedirectingServer) -> tuple:
    """One completion request and one /metrics scrape of ``server``, each redirected."""
    async with client_for(server.url) as client:
        record = await client.send(completions_request(), 0, 0.0)
    poller = MetricsPoller([server.url + "/metrics"], headers=CONNECTION.request_headers())
    async with aiohttp.ClientSession() as session:
        sample = await poller.scrape_once(session, server.url + "/metrics")
    poller.parse_process.close()
    return record, sample


async def test_a_redirect_to_another_origin_carries_no_header_key_or_prompt(transport):
    with RedirectingServer(cross=True) as server:
        record, sample = await request_and_scrape(server)
    assert server.received == []  # nothing reached the other origin
    assert record.error_class == "http_307" and record.status == 307
    assert record.error is not None and server.listener_url + "/v1/completions" in record.error
    assert "another origin" in record.error and TOKEN not in record.error and API_KEY not in record.error
    assert not sample.ok and sample.error is not None
    assert server.listener_url + "/metrics" in sample.error and sample.error.startswith("HTTP 302")


async def test_a_redirect_within_the_origin_is_followed(transport):
    with RedirectingServer(cross=False) as server:
        record, sample = await request_and_scrape(server)
    assert record.ok, record.error
    assert sample.ok, sample.error
    assert server.redirected >= 2  # the request and the scrape were redirected, then served


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_v1_models_redirected_to_another_origin_is_one_line_naming_it(status):
    with RedirectingServer(cross=True) as server:
        url = server.listener_url + "/v1/models"

        async def models(request: web.Request) -> web.Response:
            return web.Response(status=status, headers={"Location": url})

        app = web.Application()
        app.router.add_get("/v1/models", models)
        runner, origin = await start_app(app)
        try:
            with pytest.raises(UserError) as err:
                await probe_models(origin, connection=CONNECTION)
        finally:
            await runner.cleanup()
    assert server.received == []
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{origin}/v1/models: HTTP {status}") and url in line


@pytest.mark.slow
def test_a_run_against_a_redirecting_server_goes_on_sends_nothing_elsewhere_and_says_so_once(tmp_path):
    recording, result = tmp_path / "run.rwrec", tmp_path / "run.json"
    with RedirectingServer(cross=True) as server:
        proc = subprocess.run(
            [
                sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless",
                "--target", server.url, "--model", "tiny", "--duration", "2", "--start-rps", "4", "--end-rps", "4",
                "--header", f"X-Gateway-Token: {TOKEN}", "--api-key", API_KEY,
                "--record", str(recording), "--result-json", str(result),
            ],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert server.received == []
    assert "Traceback" not in proc.stderr and TOKEN not in proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stderr  # every request failed: above --max-error-rate
    assert json.loads(result.read_text())["completed"] == 0

    from rampwatch.record.reader import open_recording

    rec = open_recording(recording)
    try:
        failed = [r for r in rec.requests if r.error_class == "http_307"]
        assert len(failed) == len(rec.requests) >= 6  # every request recorded, none followed
        told = [e for e in rec.events if e.message.startswith("requests redirected")]
        assert len(told) == 1 and server.listener_url in told[0].message
        scrape_errors = [e for e in rec.events if e.kind == "scrape_error"]
        assert len(scrape_errors) == 1 and server.listener_url + "/metrics" in scrape_errors[0].message
    finally:
        rec.close()
