"""A server whose `/metrics` hangs: the run's start waits for it no longer than a scrape's
own timeout (it used to wait the 5 s of the /v1/models probe), and the run's clock never
runs backwards (the headless progress said `[4s] starting`, then `[1s] ramping`)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from rampwatch.core.timeline import NullSink
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import SimServer, run_server

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # starts a process (tests/tiers.py); bounds in wall-clock time

SCRAPE_TIMEOUT_S = 0.5


class MetricsHangs(SimServer):
    """The simulator, but its /metrics never answers; ``asked`` is set at the first GET,
    with the run's clock then in ``clock_when_asked``."""

    def __init__(self, config: SimConfig, run_clock) -> None:
        super().__init__(config)
        self.run_clock = run_clock
        self.asked = asyncio.Event()
        self.clock_when_asked: float | None = None

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.asked.is_set():
            self.clock_when_asked = self.run_clock()
            self.asked.set()
        await asyncio.Event().wait()  # until the client gives up
        raise AssertionError("unreachable")


class StartSink(NullSink):
    def __init__(self, run_clock) -> None:
        self.run_clock = run_clock
        self.started_at: float | None = None  # monotonic
        self.clock_at_start: float | None = None
        self.events = []

    def on_start(self, header):
        self.started_at = time.monotonic()
        self.clock_at_start = self.run_clock()
        self.header = header

    def on_event(self, event):
        self.events.append(event)


async def test_a_hanging_metrics_delays_the_start_by_a_scrape_timeout_at_most_and_the_clock_never_runs_back():
    scenario = load_scenario(
        "random",
        overrides=[
            ("schedule", "{}"),
            ("schedule.kind", "constant"),
            ("schedule.rate", "4"),
            ("schedule.duration_s", "1"),
        ],
    )
    run_clock: list[Run] = []  # the run, once built: the server and the sink read its clock
    server = MetricsHangs(SimConfig(hardware="instant", model="tiny"), lambda: run_clock[0].now())
    sink = StartSink(lambda: run_clock[0].now())
    async with run_server(server) as url:
        options = RunOptions(target=url, model="tiny", scrape_timeout_s=SCRAPE_TIMEOUT_S, scrape_interval_s=0.25)
        run = Run(scenario, options, sinks=[sink])
        run_clock.append(run)
        began = time.monotonic()
        result = await run.execute()

    assert server.asked.is_set()
    assert sink.started_at is not None and sink.started_at - began < SCRAPE_TIMEOUT_S + 1.0  # was 5 s and more
    assert "/metrics" in sink.header.server_info["errors"]  # the header says why it has no cache config
    # one clock, from one origin: while starting the run is at 0, never ahead of its start
    assert server.clock_when_asked == 0.0
    assert sink.clock_at_start is not None and server.clock_when_asked <= sink.clock_at_start < 0.1
    assert result.duration_s >= 1.0
