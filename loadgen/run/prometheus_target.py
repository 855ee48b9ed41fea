"""The run as a Prometheus target (`rampwatch run --prometheus-port PORT`): a
``TimelineSink`` that keeps the run's client-side figures as plain counters, and an HTTP
server on a thread of its own that renders them for a scrape.

What a scrape reads (every series labelled ``run_id`` and ``scenario``; request series
also ``class``, the mixture's class or ``""``; past ``MAX_CLASS_LABELS`` classes the rest
share ``OTHER_CLASS``):

- ``rampwatch_requests_total{outcome}``: requests ended, ``ok`` / ``failed`` / ``cancelled``
- ``rampwatch_prompt_tokens_total``, ``rampwatch_generation_tokens_total`` (ok requests)
- ``rampwatch_time_to_first_token_seconds``, ``rampwatch_inter_token_latency_seconds``
  (chunk gaps), ``rampwatch_e2e_request_latency_seconds``: histograms of ok requests, on
  vLLM's own bucket edges (and a few finer ones below them), so the client's and the
  server's ``histogram_quantile`` lines compare at one resolution
- ``rampwatch_send_lateness_seconds``: how late each request was sent (``sent_at -
  scheduled_at``, the summary's send lateness: requests really sent; it holds a
  ``--max-concurrency`` wait)
- ``rampwatch_offered_requests_total``, ``rampwatch_sent_requests_total``; gauges
  ``rampwatch_target_rate_rps``, ``rampwatch_offered_rate_rps``, ``rampwatch_achieved_rate_rps``
  (over the last tick), ``rampwatch_in_flight_requests``, ``rampwatch_client_queued_requests``
- ``rampwatch_loop_lag_seconds`` (the run's self-check, ``loop_health``: every lag sample,
  a histogram) and ``rampwatch_loop_lag_max_seconds`` (the last tick's worst)
- ``rampwatch_run_info{model}`` (1) and ``rampwatch_run_done`` (1 once the run ended)

**Cost on the run's loop.** The sink's calls add to ints and lists (a bisect per figure,
one per chunk gap); the exposition is built on the server's thread when scraped. The
scrape thread reads what the loop writes without a lock: a scrape may see a request in
one family and not yet in another, never a torn number (the GIL).

**Processes.** Where the run is built, the port is only tried (``check_port``: one in
use fails there, one line naming the flag, before any request); ``on_start`` binds it
and starts the thread that serves it, in the process that runs the load: the live screen
forks the run after it is built, a thread does not survive a fork, and a listening
socket left open in the screen's process would queue scrapes nobody answers once the run
process has ended. After the run, ``linger`` keeps serving until a scrape has read the
final figures, within a bound (``--prometheus-linger``: app.session.prometheus_linger).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer

from rampwatch.core import vllm_buckets
from rampwatch.core.errors import UserError
from rampwatch.core.figures.client_lag import bucket_ms
from rampwatch.core.text import printable
from rampwatch.core.timeline import Event, RequestRecord, RunHeader, ServerSample, Tick

DEFAULT_HOST = "127.0.0.1"

# vLLM's edges (core.vllm_buckets), with finer ones below where a client sees faster
# figures (a simulator's or a small model's few-millisecond decode steps, short answers).
TTFT_BUCKETS_S: tuple[float, ...] = vllm_buckets.TTFT_S
ITL_BUCKETS_S: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.0075, *vllm_buckets.ITL_S)
E2E_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.2, *vllm_buckets.REQUEST_LATENCY_S)
# fmt: off
# Send lateness and loop lag: a healthy client is well under a millisecond.
LAG_BUCKETS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
# fmt: on

OUTCOMES = ("ok", "failed", "cancelled")

# Each class label costs ~100 series (four histograms of ~24 buckets, the counters): a
# scenario's first MAX_CLASS_LABELS classes are labelled by name, the rest share
# OTHER_CLASS (a name no mixture gives: the parentheses), said once where the run is built.
MAX_CLASS_LABELS = 20
OTHER_CLASS = "(other)"


def outcome_of(record: RequestRecord) -> str:
    """A record's outcome label: ok, cancelled, else failed (as the summary counts them)."""
    if record.error_class is None:
        return "ok"
    return "cancelled" if record.error_class == "cancelled" else "failed"


@dataclass
class Histogram:
    """Counts per bucket edge (the last slot: above every edge) and the sum."""

    edges: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.edges) + 1)

    def observe(self, value: float) -> None:
        # bisect_left: a value on an edge belongs to that edge's bucket (le is "≤")
        self.counts[bisect_left(self.edges, value)] += 1
        self.total += value

    def observe_many(self, value: float, count: int) -> None:
        self.counts[bisect_left(self.edges, value)] += count
        self.total += value * count

    def cumulative(self) -> list[tuple[str, float]]:
        """``[(le, cumulative count), …, ("+Inf", n)]`` as the exposition wants them."""
        counts = list(self.counts)  # a copy: the loop goes on adding
        out, seen = [], 0
        for edge, count in zip((*map(_edge_text, self.edges), "+Inf"), counts, strict=True):
            seen += count
            out.append((edge, float(seen)))
        return out


def _edge_text(edge: float) -> str:
    return repr(float(edge))


@dataclass
class ClassFigures:
    """One request class's figures."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    prompt_tokens: int = 0
    generation_tokens: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS_S))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS_S))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS_S))
    lateness: Histogram = field(default_factory=lambda: Histogram(LAG_BUCKETS_S))

    def add(self, record: RequestRecord) -> None:
        outcome = outcome_of(record)
        self.outcomes[outcome] += 1
        # As the summary's send lateness: a request that ended at the instant it was to be
        # sent (cancelled while it waited for a slot, its worker lost) had no real send.
        if outcome == "ok" or record.sent_at != record.end_at:
            self.lateness.observe(max(0.0, record.sent_at - record.scheduled_at))
        if outcome != "ok":
            return
        self.prompt_tokens += record.prompt_tokens
        self.generation_tokens += record.completion_tokens
        self.e2e.observe(record.e2e)
        first = record.first_token_at
        if first is None:
            return
        self.ttft.observe(first - record.sent_at)
        previous = first
        itl = self.itl
        for t in record.chunk_times:
            itl.observe(t - previous)
            previous = t


@dataclass
class TickFigures:
    """What the last tick said, and the loop lag of every tick so far."""

    target_rps: float = 0.0
    offered_rps: float = 0.0
    achieved_rps: float = 0.0
    in_flight: int = 0
    client_queued: int = 0
    offered_total: int = 0
    sent_total: int = 0
    loop_lag_max_s: float = 0.0
    loop_lag: Histogram = field(default_factory=lambda: Histogram(LAG_BUCKETS_S))
    done: bool = False
    # the previous tick's time, offered count and ended-ok count (for the rates)
    previous: tuple[float, int, int] | None = None


class RunMetrics:
    """The run's figures as the sink keeps them and a scrape renders them."""

    def __init__(self, run_id: str, scenario: str, max_classes: int = MAX_CLASS_LABELS) -> None:
        self.run_id = run_id
        self.scenario = scenario
        self.model = ""
        self.classes: dict[str, ClassFigures] = {}
        self.max_classes = max_classes  # class labels by name; past them OTHER_CLASS
        self.ticks = TickFigures()
        self.ok_total = 0

    def class_figures(self, name: str) -> ClassFigures:
        """The figures the class ``name`` adds to: its own while fewer than ``max_classes``
        are labelled by name, else ``OTHER_CLASS``'s."""
        figures = self.classes.get(name)
        if figures is None:
            named = len(self.classes) - (OTHER_CLASS in self.classes)
            if named >= self.max_classes:
                name = OTHER_CLASS
                figures = self.classes.get(name)
            if figures is None:
                figures = self.classes[name] = ClassFigures()
        return figures

    def add_request(self, record: RequestRecord) -> None:
        figures = self.class_figures(record.request_class or "")
        figures.add(record)
        if record.error_class is None:
            self.ok_total += 1

    def add_tick(self, tick: Tick) -> None:
        ticks = self.ticks
        ticks.target_rps = tick.target_rps
        ticks.in_flight = tick.in_flight
        ticks.client_queued = tick.client_queued
        if tick.offered_total is not None:
            ticks.offered_total = tick.offered_total
        if tick.sent_total is not None:
            ticks.sent_total = tick.sent_total
        if ticks.previous is not None:
            t0, offered0, ok0 = ticks.previous
            if tick.t > t0:
                ticks.offered_rps = (ticks.offered_total - offered0) / (tick.t - t0)
                ticks.achieved_rps = (self.ok_total - ok0) / (tick.t - t0)
        ticks.previous = (tick.t, ticks.offered_total, self.ok_total)
        if tick.loop_lag_max_ms is not None:
            ticks.loop_lag_max_s = tick.loop_lag_max_ms / 1000.0
        for bucket, count in tick.loop_lag or ():
            ticks.loop_lag.observe_many(bucket_ms(int(bucket)) / 1000.0, int(count))
        if tick.state == "done":
            ticks.done = True

    def families(self) -> Iterator[Metric]:
        """Every metric family, built now (on the scrape's thread)."""
        run = [self.run_id, self.scenario]
        labels, request_labels = ["run_id", "scenario"], ["run_id", "scenario", "class"]
        classes = list(self.classes.items())  # a copy: the loop may add a class meanwhile
        info = GaugeMetricFamily("rampwatch_run_info", "The run (1)", labels=[*labels, "model"])
        info.add_metric([*run, self.model], 1)
        yield info
        requests = CounterMetricFamily(
            "rampwatch_requests", "Requests ended, by outcome", labels=[*request_labels, "outcome"]
        )
        prompt = CounterMetricFamily("rampwatch_prompt_tokens", "Prompt tokens of ok requests", labels=request_labels)
        generation = CounterMetricFamily(
            "rampwatch_generation_tokens", "Completion tokens of ok requests", labels=request_labels
        )
        for name, figures in classes:
            for outcome, count in list(figures.outcomes.items()):
                requests.add_metric([*run, name, outcome], count)
            prompt.add_metric([*run, name], figures.prompt_tokens)
            generation.add_metric([*run, name], figures.generation_tokens)
        yield from (requests, prompt, generation)
        for metric, doc, pick in (
            ("rampwatch_time_to_first_token_seconds", "Time to first token (client side)", "ttft"),
            ("rampwatch_inter_token_latency_seconds", "Gaps between streamed chunks (client side)", "itl"),
            ("rampwatch_e2e_request_latency_seconds", "End-to-end request latency (client side)", "e2e"),
            ("rampwatch_send_lateness_seconds", "How late each request was sent", "lateness"),
        ):
            family = HistogramMetricFamily(metric, doc, labels=request_labels)
            for name, figures in classes:
                histogram: Histogram = getattr(figures, pick)
                family.add_metric([*run, name], histogram.cumulative(), histogram.total)
            yield family
        yield from self._tick_families(run, labels)

    def _tick_families(self, run: list[str], labels: list[str]) -> Iterator[Metric]:
        ticks = self.ticks
        for metric, doc, value in (
            ("rampwatch_offered_requests", "Requests the schedule offered", ticks.offered_total),
            ("rampwatch_sent_requests", "Requests sent", ticks.sent_total),
        ):
            counter = CounterMetricFamily(metric, doc, labels=labels)
            counter.add_metric(run, value)
            yield counter
        for metric, doc, number in (
            ("rampwatch_target_rate_rps", "The schedule's rate now", ticks.target_rps),
            ("rampwatch_offered_rate_rps", "Requests offered per second over the last tick", ticks.offered_rps),
            ("rampwatch_achieved_rate_rps", "Requests ended ok per second over the last tick", ticks.achieved_rps),
            ("rampwatch_in_flight_requests", "Requests in flight", ticks.in_flight),
            ("rampwatch_client_queued_requests", "Requests waiting for a concurrency slot", ticks.client_queued),
            ("rampwatch_loop_lag_max_seconds", "The client loop's worst lag over the last tick", ticks.loop_lag_max_s),
            ("rampwatch_run_done", "1 once the run has ended", 1.0 if ticks.done else 0.0),
        ):
            gauge = GaugeMetricFamily(metric, doc, labels=labels)
            gauge.add_metric(run, number)
            yield gauge
        lag = HistogramMetricFamily(
            "rampwatch_loop_lag_seconds", "The client's event-loop lag samples (its self-check)", labels=labels
        )
        lag.add_metric(run, ticks.loop_lag.cumulative(), ticks.loop_lag.total)
        yield lag


def scenario_classes(scenario: Any) -> list[str]:
    """The request classes a run's scenario sends: its mixture's names, else ``""``."""
    workload = scenario.get("workload") if isinstance(scenario, dict) else None
    mix = workload.get("mix") if isinstance(workload, dict) else None
    if not isinstance(mix, list) or not mix:
        return [""]
    names = [item.get("name") for item in mix if isinstance(item, dict)]
    return [str(name) for name in names if isinstance(name, str) and name] or [""]


def class_label_note(classes: list[str], max_classes: int = MAX_CLASS_LABELS) -> str | None:
    """The one line said where a scenario has more classes than are labelled by name."""
    if len(classes) <= max_classes:
        return None
    return (
        f"--prometheus-port: the scenario has {len(classes)} classes; the first {max_classes} are labelled by "
        f'name, the other {len(classes) - max_classes} share class="{OTHER_CLASS}" (each label is ~100 series)'
    )


class _Collector:
    """The registry's view of ``RunMetrics``."""

    def __init__(self, metrics: RunMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.families()


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape (it would land on the run's screen or log)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


def exported_metric_names() -> set[str]:
    """The metric names a scrape holds, as PromQL names them (a histogram's ``_bucket``,
    ``_sum`` and ``_count``, a counter's ``_total``): for the dashboard's test."""
    metrics = RunMetrics("r", "s")
    metrics.add_request(RequestRecord(id=0, scheduled_at=0.0, sent_at=0.0, end_at=1.0, first_token_at=0.5))
    names: set[str] = set()
    for family in metrics.families():
        names.update(sample.name for sample in family.samples)
    return names


class _FinalRead:
    """A WSGI app around the exposition's that notes a scrape which read the run's final
    figures (begun after the run's end) once its answer has been written out: the body's
    ``close()``, which the server calls after the last byte (``PrometheusTarget.linger``
    then may close the port)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], metrics: RunMetrics, read: threading.Event) -> None:
        self._app, self._metrics, self._read = app, metrics, read

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        final = self._metrics.ticks.done  # read before rendering: every record is in by then
        body = self._app(environ, start_response)
        return _Answer(body, self._read if final else None)


class _Answer:
    def __init__(self, body: Iterable[bytes], read: threading.Event | None) -> None:
        self._body, self._read = body, read

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        if self._read is not None:
            self._read.set()


class PrometheusTarget:
    """A ``TimelineSink`` that serves the run's figures on ``host:port`` (``bind``, then
    ``on_start`` serves; ``linger`` waits, after the run, for a scrape of its final
    figures; ``close`` stops)."""

    def __init__(self, port: int, host: str = DEFAULT_HOST, run_id: str | None = None) -> None:
        self.port = port
        self.host = host
        self.metrics = RunMetrics(run_id or "", "")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self.metrics))
        self._server: ThreadingWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.final_read = threading.Event()  # a scrape has read the figures of the ended run
        self.finished_at: float | None = None  # time.monotonic() at the run's end

    @property
    def address(self) -> tuple[str, int]:
        """Where it serves (the port the system chose for port 0)."""
        if self._server is None:
            return self.host, self.port
        return self.host, int(self._server.server_address[1])

    def bind(self) -> None:
        """Take the port now: one in use (or a host that is not this machine's) is a
        one-line ``UserError`` naming the flag."""
        if self._server is not None:
            return
        try:
            self._server = make_server(
                self.host,
                self.port,
                _FinalRead(make_wsgi_app(self.registry), self.metrics, self.final_read),
                ThreadingWSGIServer,
                handler_class=_QuietHandler,
            )
        except OSError as exc:
            reason = printable(exc.strerror or str(exc))
            raise UserError(
                f"--prometheus-port {self.port}: cannot serve on {self.host}:{self.port} ({reason})"
            ) from None

    def check_port(self) -> None:
        """Whether the port can be served: bound and let go at once (``bind``'s error)."""
        self.bind()
        self.close()

    def serve(self) -> None:
        """Serve from a daemon thread (binding first if not bound yet)."""
        self.bind()
        if self._thread is None and self._server is not None:
            self._thread = threading.Thread(target=self._server.serve_forever, name="rampwatch-prometheus", daemon=True)
            self._thread.start()

    @property
    def serving(self) -> bool:
        """Whether this process serves the port now (bound and its thread started)."""
        return self._server is not None and self._thread is not None

    def awaits_final_read(self) -> bool:
        """Serving an ended run whose final figures no scrape has read yet."""
        return self.serving and self.finished_at is not None and not self.final_read.is_set()

    def linger(self, bound_s: float) -> bool:
        """After the run: serve until a scrape has read its final figures, at most until
        ``bound_s`` after the run's end; then close. Whether such a scrape came.
        ``KeyboardInterrupt`` (Ctrl-C) is the caller's: it skips the wait."""
        try:
            if self.awaits_final_read() and self.finished_at is not None:
                left = self.finished_at + bound_s - time.monotonic()
                if left > 0:
                    self.final_read.wait(left)
            return self.final_read.is_set()
        finally:
            self.close()

    def close(self) -> None:
        """Stop serving and free the port."""
        server, self._server = self._server, None
        if server is None:
            return
        if self._thread is not None:
            server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        server.server_close()

    # TimelineSink

    def on_start(self, header: RunHeader) -> None:
        self.metrics.scenario = printable(header.scenario_name)
        self.metrics.model = printable(header.model)
        # Every class's series from the start, at 0 (Prometheus' rate() needs the 0)
        for name in scenario_classes(header.scenario):
            self.metrics.class_figures(name)
        self.serve()

    def on_request(self, record: RequestRecord) -> None:
        try:
            self.metrics.add_request(record)
        except Exception:  # a sink never raises; a damaged figure is left out
            pass

    def on_scrape(self, sample: ServerSample) -> None:
        pass

    def on_tick(self, tick: Tick) -> None:
        try:
            self.metrics.add_tick(tick)
        except Exception:  # a sink never raises
            pass

    def on_event(self, event: Event) -> None:
        pass

    def on_finish(self, t: float) -> None:
        self.finished_at = time.monotonic()
        self.metrics.ticks.done = True
