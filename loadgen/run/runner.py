"""Run orchestration: follow the schedule open-loop, stream every request, scrape
`/metrics` beside it, tick once a second, and publish everything through one sink.

``Run`` is built in layers, each in its module: the state it keeps (``run_state``), its
steering (``steering``), the load loop (``load_loop``), and here the run's start and
end, the scrapes and the ticks. Its options and result are ``options`` and ``result``.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import socket
import time
from typing import Any

from rampwatch.core.figures.gpu import NVML_URL
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.core.redact import redact_options, redact_text
from rampwatch.core.text import printable_value, server_text
from rampwatch.core.timeline import Event, RunHeader, ServerSample, Tick, TimelineSink
from rampwatch.core.version import rampwatch_version
from rampwatch.loadgen.run import eventloop
from rampwatch.loadgen.run.load_loop import LoadLoop
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.result import RunResult
from rampwatch.loadgen.run.search_control import SearchControl
from rampwatch.loadgen.run.workers import ClientSpec, Sender
from rampwatch.loadgen.server.gpu import NvmlReader, NvmlUnavailable, poll_nvml
from rampwatch.loadgen.server.scrape import MetricsPoller
from rampwatch.loadgen.transport.client import StreamingClient
from rampwatch.loadgen.transport.open_files import raise_open_files_limit
from rampwatch.loadgen.transport.server_probe import check_adapters_served
from rampwatch.loadgen.workload.adapters import adapter_names
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import Scenario

log = logging.getLogger(__name__)

# Series said unusable in a run's events, at most (each scrape's sample still names its own).
MAX_REJECTED_EVENTS = 20


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "event_loop": eventloop.loop_name(),
    }


class Run(LoadLoop):
    """One load run. Implements ``RunControl`` (``RunSteering``); ``execute()`` runs it to the end."""

    def __init__(
        self,
        scenario: Scenario,
        options: RunOptions,
        sinks: list[TimelineSink] | None = None,
        factory: RequestFactory | None = None,
    ) -> None:
        super().__init__(scenario, options, sinks, factory)
        # rampwatch search: the controller that steers the run, a sink of its records.
        self.search = SearchControl(self, options.search) if options.search is not None else None
        if self.search is not None:
            self.sink.sinks.append(self.search)
        if options.sender_factory is not None:  # a worker lost mid-run stops the run
            options.sender_factory.on_lost = self.worker_lost
            options.sender_factory.on_lag = self.health.merge_worker

    # -- the run -------------------------------------------------------------------------
    async def execute(self) -> RunResult:
        """Run the schedule to its end (or a stop), then wait for every in-flight request
        (state "draining"); raises ``TargetUnreachable`` before the first send when the
        target does not answer, and ``ModelNotServed`` when it lists its models and the
        run's model is not among them."""
        self._schedule_changed = asyncio.Event()
        self._none_in_flight = asyncio.Event()
        opts = self.options
        concurrency = self.scenario.max_concurrency
        open_files_warning = raise_open_files_limit(concurrency)  # before any socket, and the workers
        client = StreamingClient(
            opts.target,
            opts.model,
            connection_limit=concurrency or 0,
            request_timeout_s=opts.request_timeout_s,
            clock=self.now,
            fallback_tokenizer=opts.tokenizer,
            connection=self.connection,
            keep_generated_text=opts.save_generated_texts,
        )
        await client.start()
        sender: Sender = client
        nvml: NvmlReader | None = None
        try:
            # One /v1/models probe: is the server there, does it serve the model, and
            # what the recording's header keeps about it.
            server_info = await client.fetch_server_info(
                require_model=True, answer=opts.models_answer, extras_timeout_s=opts.scrape_timeout_s
            )
            check_adapters_served(
                adapter_names(self.scenario.workload),
                server_info,
                redact_text(opts.target),
                self.connection.secrets(),
            )
            if opts.managed_server is not None:
                server_info = {**server_info, "managed_server": opts.managed_server}
            metrics_urls = opts.metrics_urls or [opts.target.rstrip("/") + "/metrics"]
            nvml, gpu_note = await self._open_nvml()
            # A sender factory's set-up that takes seconds (worker processes started, a
            # cluster's actors placed and their clocks measured) comes before t = 0, or the
            # schedule's first seconds would be late.
            if opts.sender_factory is not None:
                await opts.sender_factory.prepare(self.client_spec())
            if self.sessions is None:  # a session's turns are built from its answers
                await self.requests.start()
            self.health.start()  # a full collection and the heap frozen, before t = 0
            self._t0 = t0 = time.monotonic()
            started_at_unix = time.time()
            if opts.sender_factory is not None:
                sender = opts.sender_factory(self.client_spec(), t0, started_at_unix)
                await sender.start()
            header = RunHeader(
                rampwatch_version=rampwatch_version(),
                started_at_unix=started_at_unix,
                target=redact_text(opts.target),  # what every screen, file and log shows
                # the server's first model, maybe: its text, which may echo a header or the key
                model=server_text(opts.model, self.connection.secrets()),
                scenario_name=self.scenario.name,
                scenario=self.scenario.raw,
                options={**redact_options(opts.cli_options), "drain": str(opts.drain)},
                planned_duration_s=self.schedule.planned_duration_s,
                server_info=printable_value(server_info, one_line=True),
                host_info=host_info() | (opts.sender_factory.host_info() if opts.sender_factory else {}),
                metrics_urls=[redact_text(url) for url in metrics_urls],
                gpu_sources=([NVML_URL] if nvml is not None else []) + [redact_text(u) for u in opts.gpu_metrics_urls],
                gpu_simulated=opts.gpu_simulated,
                cache_salt_policy=opts.cache_salt_policy,
                cache_salt=opts.cache_salt,
            )
            self._header = header
            self.knee.limits = ServerLimits.of_run(header, opts.server_limits)
            self.sink.on_start(header)
            self.sink.on_event(
                Event(
                    0.0,
                    "start",
                    f"run started: {self.scenario.name} against {header.target}; {opts.drain.describe()}",
                    {"drain": str(opts.drain)},
                )
            )
            models_error = server_info["errors"].get("/v1/models")
            if models_error is not None:  # e.g. a gateway without the route: go on, unchecked
                warning = f"--model {opts.model!r} not checked: /v1/models: {models_error}"
                log.warning(warning)
                self.sink.on_event(Event(0.0, "info", server_text(warning, self.connection.secrets())))
            if gpu_note is not None:
                self.sink.on_event(Event(0.0, "info", gpu_note, {"gpu": "hidden"}))
            for note in opts.server_notes:
                self.sink.on_event(Event(0.0, "info", note, {"server": "started with"}))
            if open_files_warning is not None:
                log.warning(open_files_warning)
                self.sink.on_event(Event(0.0, "info", open_files_warning, {"open_files": "short"}))
            for note, data in opts.sender_factory.start_notes if opts.sender_factory else ():  # where they are
                self.sink.on_event(Event(0.0, "info", note, data))
            # A first tick at once: the screen shows the run's state (and takes steering
            # keys) from its start, not from the first second's tick.
            self.sink.on_tick(self._tick(0.0))
            poller = MetricsPoller(
                metrics_urls,
                interval_s=opts.scrape_interval_s,
                timeout_s=opts.scrape_timeout_s,
                max_body_bytes=opts.metrics_max_bytes,
                clock=self.now,
                on_sample=self._on_sample,
                headers=self.connection.extra_headers(),
                ssl=self.connection.ssl(),
                dcgm_urls=opts.gpu_metrics_urls,
            )
            background = [
                asyncio.create_task(poller.run(), name="rampwatch-scrape"),
                asyncio.create_task(self._tick_loop(), name="rampwatch-tick"),
            ]
            if self.search is not None:
                background.append(asyncio.create_task(self.search.drive(), name="rampwatch-search"))
            if nvml is not None:
                background.append(
                    asyncio.create_task(
                        poll_nvml(nvml, opts.scrape_interval_s, self.now, self._on_sample), name="rampwatch-nvml"
                    )
                )
            semaphore = asyncio.Semaphore(concurrency) if concurrency else None
            try:
                if self.sessions is None:
                    await self._dispatch(sender, semaphore)
                else:
                    await self._run_sessions(self.sessions, sender, semaphore)
                await self._drain()
            finally:
                if self.sessions is not None:
                    await self.sessions.close()
                if self._restart_drain is not None:
                    background.append(self._restart_drain)
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                self.health.stop()
            end = self.now()
            self._finished = True
            final = self._tick(end)
            final.state, final.target_rps = "done", 0.0
            self.sink.on_tick(final)
            self._settle_knee(end)
            self.sink.on_event(Event(end, "stop", "run finished", {"interrupted": self._interrupted}))
            self.sink.on_finish(end)
            return RunResult(
                duration_s=end,
                requests=self.collector.requests,
                samples=self.collector.samples,
                events=self.collector.events,
                header=header,
                interrupted=self._interrupted,
                sessions_finished=self.sessions.finished_total if self.sessions is not None else None,
                counts=self.collector.counts,
                live_summary=self.series.run_summary(end, idle_duration_s=end),
                generated_texts=self.collector.generated_texts,
            )
        finally:
            self.health.stop()
            await self.requests.close()
            if sender is not client:
                await sender.close()
            await client.close()
            if nvml is not None:  # after its poll task ended (or if it never started)
                await asyncio.to_thread(nvml.close)

    def client_spec(self) -> ClientSpec:
        """What a sender of this run needs to build the run's client elsewhere."""
        opts = self.options
        return ClientSpec(
            target=opts.target,
            model=opts.model,
            connection=self.connection,
            connection_limit=self.scenario.max_concurrency or 0,
            request_timeout_s=opts.request_timeout_s,
            keep_generated_text=opts.save_generated_texts,
            fallback_tokenizer=opts.tokenizer,
        )

    async def _open_nvml(self) -> tuple[NvmlReader | None, str | None]:
        """NVML when the run asked for it (``gpu_nvml``) and it opens; else why there is no
        GPU telemetry, if no DCGM exporter gives it either (the run goes on without)."""
        opts = self.options
        if opts.gpu_nvml:
            try:
                return await asyncio.to_thread(NvmlReader.open), None
            except NvmlUnavailable as exc:
                if not opts.gpu_metrics_urls:
                    return None, f"{exc}: GPU panel hidden"
                log.info("NVML not read: %s", exc)
                return None, None
        if not opts.gpu_metrics_urls and opts.gpu_note:
            return None, opts.gpu_note
        return None, None

    def _on_sample(self, sample: ServerSample) -> None:
        """Every scrape goes to the sinks; an event only when a URL's scrapes start failing,
        fail for another reason, or recover: a dead server's failure each second is one
        event, not one per second (the samples, recorded too, carry every failure; the
        events panel shows their counts from them)."""
        self.sink.on_scrape(sample)
        self._note_rejected(sample)
        failing = self._scrape_failing.get(sample.url)
        if sample.ok:
            if failing is not None:
                del self._scrape_failing[sample.url]
                self.sink.on_event(
                    Event(
                        sample.t,
                        "info",
                        f"{sample.url}: answering again after {failing[1]} failed scrapes",
                        {"url": sample.url, "failed_scrapes": failing[1]},
                    )
                )
            return
        error = sample.error or "failed"
        if failing is None or failing[0] != error:
            self.sink.on_event(Event(sample.t, "scrape_error", f"{sample.url}: {error}", {"url": sample.url}))
        self._scrape_failing[sample.url] = (error, 1 + (failing[1] if failing else 0))

    def _note_rejected(self, sample: ServerSample) -> None:
        """One event per series a URL's pages gave unusable (NaN, infinite, negative) or
        twice, the first time: the figures go on without it (``scrape.screen_samples``)."""
        for series, note in sample.rejected.items():
            if (sample.url, series) in self._rejected_seen or len(self._rejected_seen) >= MAX_REJECTED_EVENTS:
                continue
            self._rejected_seen.add((sample.url, series))
            message = server_text(f"{sample.url}: /metrics {series}: {note}", self.connection.secrets())
            self.sink.on_event(Event(sample.t, "info", message, {"url": sample.url, "rejected_series": series}))

    async def _tick_loop(self) -> None:
        interval = self.options.tick_interval_s
        next_t = interval
        while True:
            await asyncio.sleep(max(0.0, next_t - self.now()))
            t = self.now()
            self.sink.on_tick(self._tick(t))
            self._check_knee()
            next_t += interval

    def _tick(self, t: float) -> Tick:
        if not self._stopping and self.schedule.state != "done":
            # Once the schedule is over (or stopped) the last plan stands.
            self._planned_end = self.schedule.planned_end_s(t)
        client = self.health.take()
        if client.full_gc_pause_ms is not None:  # the one full collection the load allows: said
            self.sink.on_event(
                Event(
                    t,
                    "info",
                    f"the client ran a full garbage collection ({client.full_gc_pause_ms:.0f} ms) as its memory "
                    f"grew: requests in flight then were delayed by up to that",
                    {"gc_pause_ms": client.full_gc_pause_ms},
                )
            )
        return Tick(
            t,
            self.schedule.current_rate(t) if not self._stopping else 0.0,
            self.state,
            self.in_flight,
            self._client_queued,
            offered_total=self._offered_total,
            sent_total=self._sent_total,
            peak_in_flight=self._peak_in_flight,
            oldest_sent_at=self.oldest_sent_at,
            planned_end_s=self._planned_end,
            active_sessions=self.sessions.active if self.sessions is not None else 0,
            sessions_started_total=self.sessions.started_total if self.sessions is not None else 0,
            sessions_finished_total=self.sessions.finished_total if self.sessions is not None else 0,
            loop_lag=client.lag.pairs(),
            loop_lag_max_ms=client.lag.max_ms if client.lag.n else None,
            client_counts=client.counts.to_dict(),
        )
