"""Run orchestration: follow the schedule open-loop, stream every request, scrape
`/metrics` beside it, tick once a second, and publish everything through one sink.

The dispatcher sleeps until the schedule's next send time and fires one task per
request; nothing it does waits on a response, a scrape or a sink, so the send times stay
on schedule (lateness is recorded: ``sent_at - scheduled_at``). Steering calls
(``hold``/``resume``/``set_rate``/``step_rate``/``mark``/``stop``) must be made on the run's
event loop thread; under the UI, the run process's pipe reader makes them there
(``app.bridge``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import platform
import socket
import time
from array import array
from dataclasses import dataclass, field, replace
from typing import Any

from rampwatch.core.cache_salt import NONE
from rampwatch.core.figures.gpu import NVML_URL
from rampwatch.core.figures.knee import KneeDetector
from rampwatch.core.figures.knee_explain import KneeReview
from rampwatch.core.figures.segments import RESUME_CHOICES, config_event
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.core.figures.summary import Summary
from rampwatch.core.redact import redact_options, redact_text
from rampwatch.core.text import printable_value, server_text
from rampwatch.core.timeline import (
    CANCELLED,
    Event,
    FanoutSink,
    RequestRecord,
    RunHeader,
    ServerSample,
    Snapshot,
    Tick,
    TimelineSink,
)
from rampwatch.core.version import rampwatch_version
from rampwatch.loadgen.run import eventloop
from rampwatch.loadgen.run.drain import DrainPolicy
from rampwatch.loadgen.run.loop_health import ClientHealth
from rampwatch.loadgen.run.workers import ClientSpec, Sender, SenderFactory
from rampwatch.loadgen.server.gpu import NvmlReader, NvmlUnavailable, poll_nvml
from rampwatch.loadgen.server.scrape import DEFAULT_MAX_BODY_BYTES, MetricsPoller
from rampwatch.loadgen.transport.client import RequestCancelled, StreamingClient
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.transport.open_files import raise_open_files_limit
from rampwatch.loadgen.transport.redirects import REDIRECT_STATUSES
from rampwatch.loadgen.transport.server_probe import ModelsAnswer
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.requests_ahead import BuilderLost, RequestsAhead
from rampwatch.loadgen.workload.scenario import Scenario
from rampwatch.loadgen.workload.schedule_spec import USERS_KIND
from rampwatch.loadgen.workload.sessions import SessionDriver, SessionWorkload, users_for, users_message

# A request's record with one of these classes was redirected and not followed
# (``loadgen.transport.redirects``).
_REDIRECT_CLASSES = frozenset(f"http_{status}" for status in REDIRECT_STATUSES)

log = logging.getLogger(__name__)

# Series said unusable in a run's events, at most (each scrape's sample still names its own).
MAX_REJECTED_EVENTS = 20


@dataclass
class RunOptions:
    target: str
    model: str
    # The API key, --header headers and TLS setting of every request and scrape of the run.
    connection: Connection = Connection()
    # The /v1/models answer the set-up already got (it asked for the model's name): the
    # run's start uses it instead of asking again.
    models_answer: ModelsAnswer | None = None
    metrics_urls: list[str] = field(default_factory=list)  # empty: the target's /metrics
    scrape_interval_s: float = 1.0
    scrape_timeout_s: float = 2.0
    metrics_max_bytes: int = DEFAULT_MAX_BODY_BYTES
    request_timeout_s: float = 600.0
    stop_grace_s: float = 10.0  # in-flight requests get this long after a stop, then are cancelled
    drain: DrainPolicy = DrainPolicy()  # what the schedule's end does with the requests in flight
    rate_step_rps: float | None = None  # the TUI's +/- step; None: about 10% of the current rate
    tokenizer: Any = None  # TokenizerLike for the fallback token count
    cli_options: dict[str, Any] = field(default_factory=dict)  # for the header; secrets removed here
    tick_interval_s: float = 1.0
    gpu_price_per_hour: float | None = None
    save_generated_texts: bool = False  # each record keeps its answer's text (the result JSON's generated_texts)
    # The server the run started (--serve): its command and engine arguments (secrets
    # masked), startup seconds and log file; the header's server_info["managed_server"].
    managed_server: dict[str, Any] | None = None
    # GPU telemetry: DCGM exporters' /metrics pages (polled with the server's), NVML on this
    # host, and why there is none when neither is used (an info event at the start).
    gpu_metrics_urls: list[str] = field(default_factory=list)
    gpu_nvml: bool = False
    gpu_note: str | None = None
    # The server's batch and KV limits when rampwatch knows its engine arguments (a
    # managed `vllm serve`: ServerLimits.from_engine_args); the knee's explanation adds the
    # server's cache config and the run's --max-concurrency to them.
    server_limits: ServerLimits | None = None
    # The run's requests go through the sender these load workers give it (worker
    # processes, Ray actors); None: through its own client, in its own process.
    sender_factory: SenderFactory | None = None
    # Keep every record and scrape in RAM, in RunResult.requests/.samples (tests and
    # embedders that want them). A run does not by default: its records go to its
    # recording and its final figures are computed from there (app.session.finish_run),
    # so that its memory is bounded by what is in flight, not by its length.
    keep_records: bool = False
    # The DCGM page in gpu_metrics_urls is the embedded simulator's (the header says so).
    gpu_simulated: bool = False
    # --cache-salt: the policy (core.cache_salt) and the salt every request carries.
    cache_salt_policy: str = NONE
    cache_salt: str | None = None


@dataclass
class RequestCounts:
    """How many requests a run ended, and how many of those the server had a chance to
    answer (not cancelled by a stop) failed: the exit code's error rate, in fixed size."""

    ended: int = 0
    judged: int = 0  # not cancelled
    failed: int = 0  # judged and not ok

    def add(self, record: RequestRecord) -> None:
        self.ended += 1
        if record.error_class != CANCELLED:
            self.judged += 1
            self.failed += not record.ok

    @classmethod
    def of(cls, records: list[RequestRecord]) -> RequestCounts:
        counts = cls()
        for record in records:
            counts.add(record)
        return counts


@dataclass
class RunResult:
    duration_s: float
    # Only with RunOptions.keep_records: a run's final figures come from its recording.
    requests: list[RequestRecord]
    samples: list[ServerSample]
    events: list[Event]
    header: RunHeader
    interrupted: bool = False  # stopped before the schedule ended, or requests were cancelled
    recording_error: str | None = None  # set where the recording is closed (the UI's run process)
    # A session workload's sessions that ended (its ticks' sessions_finished_total).
    sessions_finished: int | None = None
    counts: RequestCounts | None = None  # None: counted from ``requests``
    # The live run-so-far summary at the end (bounded: percentiles from 1 % log buckets):
    # the figures that stand when the recording failed and the exact ones cannot be read.
    live_summary: Summary | None = None
    # Each request's answer by id, with RunOptions.save_generated_texts only (the result
    # JSON's generated_texts; recordings do not keep answers).
    generated_texts: dict[int, str] | None = None

    def __post_init__(self) -> None:
        if self.counts is None:
            self.counts = RequestCounts.of(self.requests)

    @property
    def error_rate(self) -> float:
        """Failed fraction of the requests the server had a chance to answer: requests
        cancelled by a stop (Ctrl-C, grace period over) count neither way."""
        assert self.counts is not None
        return self.counts.failed / self.counts.judged if self.counts.judged else 0.0


class RunCollector:
    """Keeps what the run's end needs in fixed size: request counts and the events (a
    few per steering call, knee, restart or scrape failure streak, not per request or
    per second). Records and scrapes only with ``keep_records``; answers' texts only with
    ``keep_texts``."""

    def __init__(self, keep_records: bool = False, keep_texts: bool = False) -> None:
        self.keep_records = keep_records
        self.requests: list[RequestRecord] = []
        self.samples: list[ServerSample] = []
        self.events: list[Event] = []
        self.counts = RequestCounts()
        self.generated_texts: dict[int, str] | None = {} if keep_texts else None
        self.header: RunHeader | None = None

    def on_start(self, header: RunHeader) -> None:
        self.header = header

    def on_request(self, record: RequestRecord) -> None:
        self.counts.add(record)
        if self.generated_texts is not None and record.generated_text:
            self.generated_texts[record.id] = record.generated_text
        if self.keep_records:
            # Packed, a chunk time takes 8 bytes instead of a list's 32.
            self.requests.append(replace(record, chunk_times=array("d", record.chunk_times)))

    def on_scrape(self, sample: ServerSample) -> None:
        if self.keep_records:
            self.samples.append(sample)

    def on_tick(self, tick: Tick) -> None:
        pass

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def on_finish(self, t: float) -> None:
        pass


def host_info() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "event_loop": eventloop.loop_name(),
    }


class Run:
    """One load run. Implements ``RunControl``; ``execute()`` runs it to the end."""

    def __init__(
        self,
        scenario: Scenario,
        options: RunOptions,
        sinks: list[TimelineSink] | None = None,
        factory: RequestFactory | None = None,
    ) -> None:
        self.scenario = scenario
        self.options = options
        self.schedule = scenario.build_schedule()
        self.factory = factory or RequestFactory(scenario, options.tokenizer, cache_salt=options.cache_salt)
        # The dispatcher's requests: built ahead, off the run's loop when that is costly.
        self.requests = RequestsAhead(self.factory)
        # A session workload: each send time starts a session (or, kind users, the
        # schedule's value is a number of users); its turns are this run's requests.
        self.sessions: SessionDriver | None = None
        if scenario.workload.get("sessions"):
            self.sessions = SessionDriver(SessionWorkload(self.factory), self.now, options.save_generated_texts)
        self.series = SeriesBuilder(slo=scenario.slo, gpu_price_per_hour=options.gpu_price_per_hour)
        self.collector = RunCollector(options.keep_records, options.save_generated_texts)
        # The client's self-check: the lag of the loops that read the streams (this
        # process's, or its load workers', each sending its own) and the GC kept off the load.
        self.health = ClientHealth(reads_streams=options.sender_factory is None)
        if options.sender_factory is not None:  # a worker lost mid-run stops the run
            options.sender_factory.on_lost = self.worker_lost
            options.sender_factory.on_lag = self.health.merge_worker
        self.sink = FanoutSink(self.series, self.collector, *(sinks or []))
        self.knee = KneeDetector()
        self.knee_review = KneeReview()  # settles each knee's explanation with the seconds after it
        self._header: RunHeader | None = None
        # The managed server's engine arguments as they stand (a restart's diff applies to
        # them): the knee's explanation judges against the configuration that is serving.
        self._engine_args: dict[str, Any] = dict((options.managed_server or {}).get("engine_args") or {})
        self._t0: float | None = None  # the run's t = 0, set once the start's checks are done
        self._stopping = False
        self._schedule_changed: asyncio.Event | None = None
        self._in_flight: set[asyncio.Task] = set()  # every request's task, waiting for a slot or sent
        self._none_in_flight: asyncio.Event | None = None
        self._client_queued = 0
        # Request id -> when it was sent, for the requests sent and not ended: in send
        # order (a dict keeps insertion order), so the first is the oldest.
        self._sending: dict[int, float] = {}
        self._peak_in_flight = 0
        self._planned_end: float | None = self.schedule.planned_duration_s
        self._finished = False
        self._offered_total = 0
        self._sent_total = 0
        self._next_id = 0
        self._interrupted = False
        self._scrape_failing: dict[str, tuple[str, int]] = {}  # url -> (reason, failures in a row)
        self._redirect_told = False  # a request's redirect not followed has been an event
        self._rejected_seen: set[tuple[str, str]] = set()  # (url, series) already said unusable
        # While the server restarts: (when the load paused, held before?, rate before).
        self._restart: tuple[float, bool, float] | None = None
        self._restart_drain: asyncio.Task | None = None

    # -- clock -------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the run's t = 0; 0 while it starts (probing the server, the first
        requests built), so that its clock never runs backwards: one clock, from one origin."""
        return 0.0 if self._t0 is None else time.monotonic() - self._t0

    # -- RunControl ----------------------------------------------------------------------
    def _steering(self) -> bool:
        """Whether the schedule can still be steered: not once a stop was asked for or
        the run has finished (a call then changes nothing and records nothing)."""
        return not self._stopping and not self._finished

    def _changed(self, event: Event) -> None:
        if self.schedule.kind == USERS_KIND:
            users_message(event)
        if event.data.get("applied", True):  # a change that changed nothing is not recorded
            self.sink.on_event(event)
        if self._schedule_changed is not None:
            self._schedule_changed.set()

    def hold(self) -> None:
        if self._steering():
            self._changed(self.schedule.hold(self.now()))

    def resume(self) -> None:
        if self._steering():
            self._changed(self.schedule.resume(self.now()))

    def set_rate(self, rps: float) -> None:
        if self._steering():
            self._changed(self.schedule.set_rate(self.now(), max(0.0, rps)))

    def step_rate(self, delta_rps: float) -> None:
        if not self._steering():
            return
        t = self.now()
        if self.schedule.kind == USERS_KIND:  # users come whole: a step is one user at least
            step = int(math.copysign(max(1.0, round(abs(delta_rps))), delta_rps)) if delta_rps else 0
            event = self.schedule.set_rate(t, max(0, users_for(self.schedule.current_rate(t)) + step))
            event.data["delta_users"] = step
            self._changed(event)
        else:
            self._changed(self.schedule.step_rate(t, delta_rps))

    def mark(self, note: str) -> None:
        if not self._finished:  # after the end the recording is closed
            self.sink.on_event(Event(self.now(), "mark", note or "mark", {"note": note}))

    def stop(self) -> None:
        """Graceful stop: no new requests; in-flight ones get ``stop_grace_s``. A stop
        before the schedule's end makes the run interrupted (exit code 130)."""
        if self._stopping or self._finished:
            return
        self._stopping = True
        if self.schedule.state != "done":
            self._interrupted = True
        if self.sessions is not None:  # no further turn; sessions thinking end now
            self.sessions.end_all()
        grace = self.options.stop_grace_s
        self.sink.on_event(
            Event(
                self.now(),
                "stop",
                f"stop requested: no new requests; in-flight ones get {grace:g} s",
                {"grace_s": grace},
            )
        )
        if self._schedule_changed is not None:
            self._schedule_changed.set()

    def interrupt(self) -> None:
        """Ctrl-C: the same graceful stop as the UI's."""
        self.stop()

    def server_exited(self, message: str, exit_code: int | None, log_tail: list[str]) -> None:
        """The server this run started exited on its own: an ``error`` event saying so (with
        its exit code and last log lines), then the usual stop."""
        self._stop_on_error(message, {"server_exit_code": exit_code, "server_log_tail": list(log_tail)})

    def _stop_on_error(self, message: str, data: dict[str, Any]) -> None:
        """An ``error`` event, then the usual stop (nothing once the run has finished)."""
        if self._finished:
            return
        self.sink.on_event(Event(self.now(), "error", message, data))
        self.stop()

    def worker_lost(self, message: str) -> None:
        """A load worker (process or Ray actor) was lost mid-run (its requests in flight
        already failed):
        an ``error`` event saying so, then the usual stop."""
        self._stop_on_error(message, {"load_worker_lost": True})

    def cancel_in_flight(self) -> None:
        """End the drain now (the UI's key, a second Ctrl-C): stop, and cancel every
        request in flight or waiting for a slot. Recorded as a ``cancel`` event; the
        cancelled requests are recorded as such and make the run interrupted."""
        if self._finished:
            return
        self.stop()
        self._cancel(list(self._in_flight), "ending the drain now")

    # -- a server restart (the app stops and starts the server between these calls) -------
    def pause_for_restart(self) -> None:
        """Stop the load for a server restart: no new sends (the schedule holds at 0, so
        its plan moves on while the server restarts); the requests in flight get the stop
        grace, then are cancelled (counted, not lost). An ``info`` event with
        ``data["restart"] == "drained"`` says when none is left in flight."""
        if not self._steering() or self._restart is not None:
            return
        t = self.now()
        self._restart = (t, self.schedule.state == "holding", self.schedule.current_rate(t))
        self._settle_knee(t)  # the overload of this configuration ends here
        event = self.schedule.set_rate(t, 0.0)
        event.message = "load paused for a server restart"
        event.data["restart"] = True
        self._changed(event)
        if self.sessions is not None:
            # A session does not span two configurations: each one's figures by turn are
            # of its own sessions (users start new ones when the load resumes).
            self.sessions.end_all()
        self._restart_drain = asyncio.ensure_future(self._drain_for_restart())

    async def _drain_for_restart(self) -> None:
        grace = self.options.stop_grace_s
        pending = set(self._in_flight)
        if pending:
            _, pending = await asyncio.wait(pending, timeout=grace)
        if pending:
            self._cancel(list(pending), f"the server restarts: the {grace:g} s grace period is over", interrupts=False)
            await asyncio.gather(*pending, return_exceptions=True)
        if self._restart is not None and not self._finished:
            self.sink.on_event(
                Event(self.now(), "info", "no request in flight: restarting the server", {"restart": "drained"})
            )

    def resume_after_restart(self, command: str, diff: list, resume: str) -> None:
        """The new server serves: record the configuration mark (command, argument diff)
        and continue the schedule from its start or as it was (the ramp where it paused,
        or the rate it held)."""
        if self._restart is None or not self._steering():
            return
        paused_at, was_holding, rate = self._restart
        self._restart = None
        t = self.now()
        if resume == "start":
            event = self.schedule.restart(t)
        elif was_holding:
            event = self.schedule.set_rate(t, rate)
        else:
            event = self.schedule.resume(t)
        self._changed(event)
        diff_rows = [(str(name), old, new) for name, old, new in diff]
        for name, _old, new in diff_rows:
            if new is None:
                self._engine_args.pop(name, None)
            else:
                self._engine_args[name] = new
        self.knee.limits = ServerLimits.of_run(self._header, ServerLimits.from_engine_args(self._engine_args))
        self.sink.on_event(
            config_event(t, command, diff_rows, resume if resume in RESUME_CHOICES else "current", paused_at)
        )

    def restart_failed(self, message: str, exit_code: int | None = None, log_tail: list[str] | None = None) -> None:
        """The new server did not start: an ``error`` event with the reason (and the
        server's exit code and last log lines), then the usual stop; the run is failed."""
        self._restart = None
        if self._finished:
            return
        data = {"server_exit_code": exit_code, "server_log_tail": list(log_tail or []), "restart": "failed"}
        self.sink.on_event(Event(self.now(), "error", message, data))
        self.stop()

    def _cancel(
        self, tasks: list[asyncio.Task], why: str, interrupts: bool = True, data: dict[str, Any] | None = None
    ) -> None:
        pending = [task for task in tasks if not task.done()]
        if not pending:
            return
        # A restart's cancellations are part of the plan; any other makes the run interrupted.
        self._interrupted = self._interrupted or interrupts
        sent = len(self._sending)
        self.sink.on_event(
            Event(
                self.now(),
                "cancel",
                f"{why}: cancelling {len(pending)} requests ({sent} in flight)",
                {"requests": len(pending), "in_flight": sent, **(data or {})},
            )
        )
        for task in pending:
            task.cancel()

    @property
    def in_flight(self) -> int:
        """Requests sent and not ended, whatever their outcome (those waiting for a
        concurrency slot excluded): the one definition of "in flight", also of its peak."""
        return len(self._sending)

    @property
    def oldest_sent_at(self) -> float | None:
        """When the oldest request in flight was sent (None: none in flight)."""
        return next(iter(self._sending.values()), None)

    @property
    def state(self) -> str:
        if self._stopping:
            return "stopping"
        if self._restart is not None:
            return "restarting"
        state = self.schedule.state
        if state == "done" and (self._in_flight or (self.sessions is not None and not self.sessions.idle.is_set())):
            return "draining"  # requests in flight, or sessions still having turns
        return state

    def snapshot(self, last_bins: int | None = None) -> Snapshot:
        return self.series.snapshot(self.now(), last_bins)

    @property
    def connection(self) -> Connection:
        """The API key, headers and TLS setting every request and scrape of the run uses."""
        return self.options.connection

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

    async def _dispatch(self, client: Sender, semaphore: asyncio.Semaphore | None) -> None:
        assert self._schedule_changed is not None and self._none_in_flight is not None
        while not self._stopping:
            # Waited for before a send time is handed out: a hold or rate change while the
            # builder process is behind re-times the send as usual.
            await self.requests.wait_ready()
            send_at = self.schedule.next_send_time()
            if send_at is None:
                return
            # A control call withdraws the send time it handed out; the next call to
            # next_send_time() returns the same request re-timed at the new rate
            # (math.inf while held at rate 0, so only a change wakes us).
            self._schedule_changed.clear()
            delay = send_at - self.now()
            if delay > 0:
                timeout = None if math.isinf(delay) else delay
                try:
                    await asyncio.wait_for(self._schedule_changed.wait(), timeout=timeout)
                except TimeoutError:
                    if self._restart is not None:
                        # The pause for a restart was applied in the loop turn this send
                        # came due in (a loop running late): nothing is sent until the
                        # restart is over. A send time already due at the pause was kept
                        # by the schedule; it is taken back and comes again at the resume.
                        if send_at <= self._restart[0]:
                            self.schedule.withdraw()
                        continue
                else:
                    continue
            if self._stopping:
                return
            if self.sessions is not None:
                self.sessions.start_session(send_at)
                continue
            try:
                request = self.requests.take()
            except BuilderLost as lost:
                self._builder_lost(str(lost))
                return
            self._launch(client, semaphore, request, send_at)

    def _builder_lost(self, message: str) -> None:
        """The process building the run's requests ahead is gone (killed, out of memory):
        no further request can be built in order, so the run stops as for a lost load
        worker (an ``error`` event, the usual stop: in-flight requests drain, the
        recording and the summary are kept)."""
        self._stop_on_error(f"{message}: the run stops here", {"request_builder_lost": True})

    async def _run_sessions(self, sessions: SessionDriver, client, semaphore) -> None:
        """A session workload's dispatch: sessions start at the schedule's send times (open
        loop) or users are kept at its value (kind users); no turn after the schedule's
        planned end, or, with a number of sessions, none after the last session's end."""
        sessions.send_turn = lambda request, at, on_record: self._launch(client, semaphore, request, at, on_record)
        assert self._schedule_changed is not None
        if self.schedule.kind == USERS_KIND:
            await sessions.run_users(self.schedule, self._schedule_changed, lambda: self._stopping)
        else:
            await self._dispatch(client, semaphore)
            # A schedule of N sessions (num_requests) lets each finish; one of a duration
            # sends no turn after its planned end.
            counted = "num_requests" in self.schedule.spec
            deadline = None if counted else self.schedule.planned_end_s(self.now())
            await sessions.wind_down(deadline, self._schedule_changed, lambda: self._stopping)
        sessions.end_all()

    def _launch(self, client, semaphore, request, scheduled_at: float, on_record=None) -> asyncio.Task:
        """One request's task, tracked in flight (drained, cancelled) until it ends."""
        assert self._none_in_flight is not None
        self._offered_total += 1
        request_id = self._next_id
        self._next_id += 1
        task = asyncio.create_task(self._one_request(client, semaphore, request, request_id, scheduled_at, on_record))
        self._in_flight.add(task)
        self._none_in_flight.clear()
        task.add_done_callback(self._request_done)
        return task

    def _request_done(self, task: asyncio.Task) -> None:
        self._in_flight.discard(task)
        if not self._in_flight and self._none_in_flight is not None:
            self._none_in_flight.set()

    async def _send(self, client, request, request_id: int, scheduled_at: float) -> RequestRecord:
        """One request sent: counted in flight from its send to its end."""
        self._sent_total += 1
        self._sending[request_id] = self.now()
        self._peak_in_flight = max(self._peak_in_flight, len(self._sending))
        try:
            return await client.send(request, request_id, scheduled_at)
        finally:
            del self._sending[request_id]

    def _publish(self, record: RequestRecord, on_record=None) -> None:
        """A request's record to ``on_record`` (a session's turn takes its answer there),
        then to the sinks."""
        if on_record is not None:
            on_record(record)
        self.sink.on_request(record)
        if not self._redirect_told and record.error_class in _REDIRECT_CLASSES:
            # Said once: each such request's record carries it too.
            self._redirect_told = True
            self.sink.on_event(Event(record.end_at, "info", f"requests redirected: {record.error}"))

    async def _one_request(
        self, client, semaphore, request, request_id: int, scheduled_at: float, on_record=None
    ) -> None:
        try:
            if semaphore is None:
                record = await self._send(client, request, request_id, scheduled_at)
            else:
                self._client_queued += 1
                try:
                    await semaphore.acquire()
                except asyncio.CancelledError:
                    # Cancelled while waiting for a slot: never sent, but scheduled, so it
                    # is recorded (cancelled, sent and ended now) rather than lost.
                    now = self.now()
                    waited = request.unanswered(
                        request_id,
                        scheduled_at,
                        now,
                        now,
                        CANCELLED,
                        "cancelled by the run while waiting for a concurrency slot",
                    )
                    self._publish(waited, on_record)
                    raise
                finally:
                    self._client_queued -= 1
                try:
                    record = await self._send(client, request, request_id, scheduled_at)
                finally:
                    semaphore.release()
        except RequestCancelled as cancelled:
            self._publish(cancelled.record, on_record)
            raise
        except Exception as exc:  # a client bug must cost one failed request, never a lost one
            now = self.now()
            record = request.unanswered(
                request_id,
                scheduled_at,
                min(now, max(scheduled_at, 0.0)),
                now,
                "client_error",
                server_text(f"{type(exc).__name__}: {exc}", self.connection.secrets())[:500],
            )
        self._publish(record, on_record)

    async def _drain(self) -> None:
        """Wait for in-flight requests as the drain policy says (``wait``: without limit,
        as vllm bench does; ``cap:S``: at most S seconds; ``cancel``: not at all), but only
        ``stop_grace_s`` once a stop is requested — also a stop that arrives while already
        draining. What the policy cancels is part of the plan: recorded as cancelled, it
        does not make the run interrupted."""
        assert self._schedule_changed is not None and self._none_in_flight is not None
        loop = asyncio.get_running_loop()
        policy = self.options.drain
        # The policy is the plan for the schedule's end; a stop that cut the schedule short
        # gives its whole grace period, whatever the policy (cancel would give none).
        deadline = None if policy.limit_s is None or self._stopping else loop.time() + policy.limit_s
        # Two waiters, not one per request: asyncio.wait over thousands of queued requests
        # re-registers a callback on each of them every time one finishes.
        while self._in_flight and not self._stopping:
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                # A request sent at the schedule's last moment may not have started yet: a
                # task cancelled before its first step would leave no record. One pass of
                # the loop starts it, so that its cancel is recorded.
                await asyncio.sleep(0)
                why = (
                    "the drain policy cancels"
                    if policy.mode == "cancel"
                    else f"the drain's {policy.cap_s:g} s cap is over"
                )
                pending = set(self._in_flight)
                self._cancel(list(pending), why, interrupts=False, data={"drain": str(policy)})
                await asyncio.gather(*pending, return_exceptions=True)
                return
            self._schedule_changed.clear()
            waiters = {
                asyncio.ensure_future(self._none_in_flight.wait()),
                asyncio.ensure_future(self._schedule_changed.wait()),
            }
            try:
                await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
        pending = set(self._in_flight)
        grace = self.options.stop_grace_s
        if deadline is not None:  # the policy's cap still holds after a stop
            grace = max(0.0, min(grace, deadline - loop.time()))
        if pending:
            done, pending = await asyncio.wait(pending, timeout=grace)
        if pending:
            self._cancel(list(pending), f"the {self.options.stop_grace_s:g} s grace period is over")
            await asyncio.gather(*pending, return_exceptions=True)

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

    def _check_knee(self) -> None:
        for t, values in self.series.take_completed_seconds():
            for event in self.knee_review.update(t, values, self.knee.update(t, values)):
                self.sink.on_event(event)

    def _settle_knee(self, t: float) -> None:
        for event in self.knee_review.finish(t):
            self.sink.on_event(event)
