"""The state one load run keeps (``RunState``): the clock, the requests in flight and what
they say about the run's state, the knee; each part of the run (steering, load loop,
ticks and scrapes) builds on it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rampwatch.core.figures.knee import KneeDetector
from rampwatch.core.figures.knee_explain import KneeReview
from rampwatch.core.figures.series import SeriesBuilder
from rampwatch.core.timeline import Event, FanoutSink, RunHeader, Snapshot, TimelineSink
from rampwatch.loadgen.run.loop_health import ClientHealth
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.result import RunCollector
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.requests_ahead import RequestsAhead
from rampwatch.loadgen.workload.scenario import Scenario
from rampwatch.loadgen.workload.sessions import SessionDriver, SessionWorkload


class RunState:
    """A run's state, shared by its steering (``RunSteering``), its load loop
    (``LoadLoop``) and the run itself (``Run``): the schedule, the sinks, the requests in
    flight, the knee, and the run's one clock."""

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
        self.sink = FanoutSink(self.series, self.collector, *(sinks or []))
        self.knee = KneeDetector()
        self.knee_review = KneeReview()  # settles each knee's explanation with the seconds after it
        self._header: RunHeader | None = None
        # The managed server's engine arguments as they stand (a restart's diff applies to
        # them): the knee's explanation judges against the configuration that is serving.
        self._engine_args: dict[str, Any] = dict((options.managed_server or {}).get("engine_args") or {})
        self._t0: float | None = None  # the run's t = 0, set once the start's checks are done
        self._stopping = False
        # rampwatch search's controller (loadgen.run.search_control), set by the run that has one
        self.search: Any = None
        self._refused_by_search = False  # a hand's steering refused during a search: said once
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

    def _check_knee(self) -> None:
        for t, values in self.series.take_completed_seconds():
            for event in self.knee_review.update(t, values, self.knee.update(t, values)):
                self.sink.on_event(event)

    def _settle_knee(self, t: float) -> None:
        for event in self.knee_review.finish(t):
            self.sink.on_event(event)
