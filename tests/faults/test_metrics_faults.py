"""A server's /metrics that is huge must not take the load process's memory or its event
loop: the body is capped (the scrape then fails with the reason) and parsed off the loop."""

from __future__ import annotations

import os
import threading

import pytest
from aiohttp import ClientSession, web

from rampwatch.loadgen.server import scrape
from rampwatch.loadgen.server.scrape import MetricsPoller
from tests.faults.conftest import start_app

PAGE = "\n".join(f'vllm:num_requests_running{{engine="0",model_name="m{i}"}} 1.0' for i in range(4000)) + "\n"


async def serve(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner, origin = await start_app(app)
    return runner, origin + "/metrics"


async def with_length(request):
    return web.Response(text=PAGE)


async def chunked_without_length(request):
    resp = web.StreamResponse()
    resp.enable_chunked_encoding()
    await resp.prepare(request)
    data = PAGE.encode()
    for i in range(0, len(data), 8192):
        await resp.write(data[i : i + 8192])
    await resp.write_eof()
    return resp


@pytest.mark.parametrize("handler", [with_length, chunked_without_length])
async def test_a_body_over_the_cap_fails_the_scrape_with_the_reason(handler):
    runner, url = await serve(handler)
    try:
        poller = MetricsPoller([url], max_body_bytes=len(PAGE) // 2)
        async with ClientSession() as session:
            sample = await poller.scrape_once(session, url)
    finally:
        await runner.cleanup()
    assert not sample.ok
    assert sample.error == f"body over {len(PAGE) // 2:,} bytes (--metrics-max-bytes)"


@pytest.mark.parametrize("handler", [with_length, chunked_without_length])
async def test_a_body_within_the_cap_is_read_whole(handler):
    runner, url = await serve(handler)
    try:
        poller = MetricsPoller([url], max_body_bytes=len(PAGE))
        async with ClientSession() as session:
            sample = await poller.scrape_once(session, url)
    finally:
        await runner.cleanup()
    assert sample.ok and sample.running == 4000  # every model's series summed


async def test_the_page_is_parsed_off_the_event_loop(monkeypatch):
    parsed_on: list[int] = []
    real_parse = scrape.parse_metrics

    def recording_parse(text, url, t):
        parsed_on.append(threading.get_ident())
        return real_parse(text, url, t)

    monkeypatch.setattr(scrape, "parse_metrics", recording_parse)
    runner, url = await serve(with_length)
    try:
        async with ClientSession() as session:
            sample = await MetricsPoller([url]).scrape_once(session, url)
    finally:
        await runner.cleanup()
    assert sample.ok
    assert parsed_on and parsed_on[0] != threading.get_ident()


@pytest.mark.slow
async def test_a_large_page_is_parsed_in_another_process(monkeypatch):
    monkeypatch.setattr(scrape, "PROCESS_PARSE_BYTES", len(PAGE) // 2)
    runner, url = await serve(with_length)
    poller = MetricsPoller([url])
    try:
        async with ClientSession() as session:
            sample = await poller.scrape_once(session, url)
            again = await poller.scrape_once(session, url)
        parser_pid = poller.parse_process.pid
    finally:
        poller.parse_process.close()
        await runner.cleanup()
    assert parser_pid is not None and parser_pid != os.getpid()
    assert sample.ok and sample.running == 4000 and again.ok  # the same process serves the next page
    assert poller.parse_process.pid is None  # closed with the poller


def page_of(series: int) -> str:
    return "".join(f'vllm:num_requests_running{{engine="0",model_name="a{i}"}} 1.0\n' for i in range(series))


def test_a_page_of_too_many_series_keeps_its_fields_but_not_its_raw_series():
    many = scrape.parse_metrics(page_of(scrape.MAX_RAW_SERIES + 1), "u", 0.0)
    assert many.ok and many.running == scrape.MAX_RAW_SERIES + 1 and many.raw == {}
    few = scrape.parse_metrics(page_of(scrape.MAX_RAW_SERIES), "u", 0.0)
    assert few.running == scrape.MAX_RAW_SERIES and len(few.raw) == scrape.MAX_RAW_SERIES
