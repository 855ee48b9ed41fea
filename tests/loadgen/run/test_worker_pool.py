"""Load from N local worker processes (``--workers N``): the split sends exactly the
single process's requests, each worker exactly its share; cancellation, a dying worker,
a worker that does not start, and shutdown without orphans."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from rampwatch.core.errors import UserError
from rampwatch.loadgen.run import worker_pool
from rampwatch.loadgen.run.loop_health import LoopLagProbe
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.run.worker_pool import LocalWorkers
from rampwatch.loadgen.run.workers import ClientSpec
from rampwatch.loadgen.transport.client import RequestCancelled
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.workload.requests import PreparedRequest
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve
from tests.loadgen.run.test_runner import ListSink, scenario

NOWHERE = ClientSpec(target="http://127.0.0.1:9", model="tiny", connection=Connection())  # never sent to
SLOW = SimConfig(hardware="l4", model="llama-3.1-8b-fp8", served_model_name="tiny")  # ~30 ms per decode step


class EchoServer:
    """An OpenAI-compatible streaming server that answers each request with a digest of
    its body, and remembers which connection (client port) each body came on."""

    def __init__(self) -> None:
        self.connection_of: dict[str, int] = {}  # body digest -> client port

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    async def complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        digest = hashlib.sha256(body).hexdigest()[:16]
        self.connection_of[digest] = request.transport.get_extra_info("peername")[1]
        chat = request.path.endswith("/chat/completions")
        choice = {"index": 0, "delta": {"content": digest}} if chat else {"index": 0, "text": digest}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in (
            {"choices": [choice]},
            {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9}},
        ):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response

    @asynccontextmanager
    async def serving(self):
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.complete)
        app.router.add_post("/v1/chat/completions", self.complete)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()


async def echo_run(workers: int) -> tuple[dict[int, tuple[float, str]], dict[str, int]]:
    """A seeded constant-rate run against the echo server: each request's scheduled time
    and body digest by id, and each body's connection."""
    server = EchoServer()
    sink = ListSink()
    async with server.serving() as url:
        options = RunOptions(
            target=url,
            model="tiny",
            save_generated_texts=True,
            scrape_interval_s=0.5,
            sender_factory=LocalWorkers(workers) if workers > 1 else None,
        )
        scn = scenario({"kind": "constant", "rate": 40, "duration_s": 1.0}, output_tokens=1)
        await Run(scn, options, sinks=[sink]).execute()
    records = sink.of("request")
    assert records and all(r.ok for r in records), [r.error for r in records if not r.ok][:3]
    return {r.id: (r.scheduled_at, r.generated_text) for r in records}, server.connection_of


@pytest.mark.slow
async def test_two_workers_send_exactly_the_single_processs_requests_each_its_share():
    single, _ = await echo_run(1)
    split, connection_of = await echo_run(2)

    # Same ids, same scheduled times, same bodies as the server received them.
    assert split == single
    assert len(set(digest for _, digest in split.values())) == len(split) >= 38
    # Each connection (a worker's own) carried only one worker's share: ids ≡ k mod 2.
    shares: dict[int, set[int]] = {}
    for request_id, (_, digest) in split.items():
        shares.setdefault(connection_of[digest], set()).add(request_id % 2)
    assert all(len(residues) == 1 for residues in shares.values()), shares
    assert set().union(*shares.values()) == {0, 1}


def request(max_tokens: int = 2000) -> PreparedRequest:
    return PreparedRequest(
        endpoint="completions",
        payload={"prompt": "hello " * 8, "max_tokens": max_tokens, "ignore_eos": True},
        expected_prompt_tokens=9,
        max_tokens=max_tokens,
    )


@asynccontextmanager
async def pool_on(url: str, workers: int, on_lost=None):
    factory = LocalWorkers(workers, on_lost=on_lost)
    spec = ClientSpec(target=url, model="tiny", connection=Connection())
    await factory.prepare(spec)
    pool = factory(spec, time.monotonic(), time.time())
    await pool.start()  # as the run does: already started by prepare
    try:
        yield pool
    finally:
        await pool.close()


def gone(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` exits within ``timeout_s`` (waits on its pidfd, no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
        return bool(readable)
    finally:
        os.close(fd)


@pytest.mark.slow
async def test_a_cancelled_request_comes_back_as_its_cancelled_record():
    async with serve(SLOW) as url, pool_on(url, 2) as pool:
        task = asyncio.create_task(pool.send(request(), 3, 0.0))
        await asyncio.sleep(0)  # its first step hands it to worker 1
        assert 3 in pool._workers[1].pending  # noqa: SLF001
        task.cancel()
        with pytest.raises(RequestCancelled) as cancelled:
            await task
    record = cancelled.value.record
    assert record.id == 3 and record.error_class == "cancelled"


@pytest.mark.slow
async def test_a_worker_that_dies_fails_its_requests_in_flight_and_says_so_once():
    lost: list[str] = []
    async with serve(SLOW) as url, pool_on(url, 2, on_lost=lost.append) as pool:
        sends = [asyncio.create_task(pool.send(request(), i, 0.0)) for i in range(4)]
        await asyncio.sleep(0)  # their first steps hand them over
        assert sorted(pool._workers[1].pending) == [1, 3]  # noqa: SLF001
        dead = pool.pids[1]
        assert dead is not None
        os.kill(dead, signal.SIGKILL)
        failed = await asyncio.gather(sends[1], sends[3])
        later = await pool.send(request(), 5, 0.0)  # its share after it died
        survivors = []
        for task in sends[0::2]:  # the other worker's go on: cancelled here, answered there
            task.cancel()
            with pytest.raises(RequestCancelled) as cancelled:
                await task
            survivors.append(cancelled.value.record)
    assert [r.id for r in failed] == [1, 3]
    for record in [*failed, later]:
        assert record.error_class == "client_error"
        assert record.error == f"load worker 1 (pid {dead}) was killed by signal 9"
    assert lost == [f"load worker 1 (pid {dead}) was killed by signal 9: its 2 request(s) in flight failed"]
    assert [(r.id, r.error_class) for r in survivors] == [(0, "cancelled"), (2, "cancelled")]


@pytest.mark.slow
async def test_a_run_whose_worker_dies_records_an_error_and_stops_losing_no_request():
    busy = asyncio.Event()

    class KnowsWhenBusy(ListSink):
        def on_tick(self, tick):
            super().on_tick(tick)
            if tick.in_flight >= 6:
                busy.set()

    sink = KnowsWhenBusy()
    async with serve(SLOW) as url:
        factory = LocalWorkers(2)
        options = RunOptions(target=url, model="tiny", stop_grace_s=0.2, scrape_interval_s=0.5, sender_factory=factory)
        run = Run(scenario({"kind": "constant", "rate": 20, "duration_s": 30}, output_tokens=2000), options, [sink])
        assert factory.on_lost == run.worker_lost  # the run wires it

        async def kill_a_worker() -> None:
            await busy.wait()
            assert factory.pool is not None
            os.kill(factory.pool.pids[0], signal.SIGKILL)

        killer = asyncio.create_task(kill_a_worker())
        result = await run.execute()
        await killer
    records = sink.of("request")
    assert sorted(r.id for r in records) == list(range(len(records)))  # none lost
    failed = [r for r in records if r.error_class == "client_error"]
    assert failed and all(r.id % 2 == 0 and "load worker 0" in (r.error or "") for r in failed)
    errors = [e for e in sink.of("event") if e.kind == "error"]
    assert len(errors) == 1 and errors[0].message.startswith("load worker 0 (pid ")
    assert result.interrupted  # stopped before the schedule's end
    assert sink.of("start")[0].host_info["load_workers"] == 2


@pytest.mark.slow
async def test_a_worker_that_cannot_start_is_one_line(monkeypatch):
    monkeypatch.setattr(worker_pool.sys, "executable", "/bin/false")
    with pytest.raises(UserError, match=r"^load worker 0 did not start: it exited$"):
        await LocalWorkers(2).prepare(NOWHERE)


@pytest.mark.slow
async def test_closing_the_pool_ends_every_worker():
    async with serve(SLOW) as url, pool_on(url, 2) as pool:
        pids = list(pool.pids)
    assert all(pid is not None and gone(pid, 0.0) for pid in pids)


@pytest.mark.slow
def test_workers_end_when_the_controller_is_killed(tmp_path):
    controller = textwrap.dedent(
        """
        import asyncio, sys
        from rampwatch.loadgen.transport.connection import Connection
        from rampwatch.loadgen.run.worker_pool import LocalWorkers
        from rampwatch.loadgen.run.workers import ClientSpec

        async def main():
            factory = LocalWorkers(2)
            await factory.prepare(ClientSpec(target="http://127.0.0.1:9", model="tiny", connection=Connection()))
            print(" ".join(str(pid) for pid in factory.pool.pids), flush=True)
            await asyncio.sleep(3600)

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", controller], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2 and not any(gone(pid, 0.0) for pid in pids)
    finally:
        proc.kill()
        proc.wait()
    assert all(gone(pid, 10.0) for pid in pids)


def test_one_worker_sends_from_the_run_process_and_more_from_a_pool():
    from rampwatch.app.run_config import RunConfig
    from rampwatch.app.session import load_senders

    assert load_senders(RunConfig("chat", workers=1)) is None  # today's path: no pool, no extra work
    assert load_senders(RunConfig("chat")) is None  # the flag not given
    factory = load_senders(RunConfig("chat", workers=3))
    assert isinstance(factory, LocalWorkers) and factory.workers == 3 and factory.pool is None


@pytest.mark.slow
async def test_each_worker_sends_its_loop_lag_and_collections_to_the_run():
    factory = LocalWorkers(2)
    seen: dict[int, tuple] = {}
    both = asyncio.Event()

    def on_lag(worker, pairs, max_ms, gc_counts) -> None:
        seen[worker] = (pairs, max_ms, gc_counts)
        if len(seen) == 2 and all(sum(c for _, c in p) > 0 for p, _, _ in seen.values()):
            both.set()

    factory.on_lag = on_lag
    spec = ClientSpec(target="http://127.0.0.1:9", model="tiny", connection=Connection())
    await factory.prepare(spec)
    pool = factory(spec, time.monotonic(), time.time())
    try:
        await asyncio.wait_for(both.wait(), 30.0)
    finally:
        await pool.close()
    for pairs, max_ms, gc_counts in seen.values():
        # a worker's probe samples its own loop every 5 ms: half a second's worth at least
        assert sum(c for _, c in pairs) >= 20 and max_ms >= 0.0
        assert len(gc_counts.collections) == 3 and gc_counts.collections[2] == 0


@pytest.mark.slow
async def test_a_run_over_workers_folds_their_lag_into_its_ticks():
    sink = ListSink()
    async with serve(SimConfig(hardware="instant", model="tiny")) as url:
        options = RunOptions(
            target=url, model="tiny", tick_interval_s=0.25, scrape_interval_s=0.25, sender_factory=LocalWorkers(2)
        )
        result = await Run(scenario({"kind": "constant", "rate": 20, "duration_s": 1.5}), options, [sink]).execute()
    own = LoopLagProbe().interval_s
    ticks = sink.of("tick")
    samples = sum(c for t in ticks for _, c in (t.loop_lag or []))
    # Each worker's probe gives one sample per 5 ms (from before the run's start): the
    # ticks carry the two workers' (the stream readers'), about twice one loop's.
    assert samples > 1.2 * result.duration_s / own
    assert result.live_summary.client is not None
    assert result.live_summary.client.lag_samples == samples
