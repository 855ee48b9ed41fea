"""The timeline a run produces: the record types, the sink they flow through, and the
snapshot that live runs and replays both hand to the UI.

Times are float seconds since the run's start (a monotonic clock), so a recording and
a live run share one axis. A run publishes one ``RunHeader`` (``on_start``), a
``RequestRecord`` for each request when it ends (success, error or cancel), a
``ServerSample`` for each ``/metrics`` scrape (one per URL per poll) and GPU telemetry
read (NVML, a DCGM exporter's page: ``ServerSample.is_gpu``), a ``Tick`` once a second,
an ``Event`` for schedule changes, holds, marks, the knee, errors, and finally
``on_finish``: ``TimelineSink`` says who calls each, on which thread, in what order, and
that a sink never raises. The recording stores exactly this stream; the replay reader
feeds it back into the same ``SeriesBuilder`` the live run uses, so both produce
identical ``Snapshot``s. What the UI drives and polls (steering, replays) is declared
in ``core.controls``.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

# The largest token count a request may carry (a server's usage above it, or below 0, is a
# protocol error): recordings store counts as int32, which a server's number cannot overflow.
MAX_TOKEN_COUNT = 2**31 - 1


@dataclass(slots=True)
class RequestRecord:
    """One request as the client saw it. Field meanings follow ``vllm bench serve``."""

    id: int
    scheduled_at: float  # when the schedule wanted it sent
    sent_at: float  # when the HTTP request actually started (after any concurrency wait)
    end_at: float  # when the response finished, failed or was cancelled
    first_token_at: float | None = None  # first chunk carrying token content
    # Arrival time of every content chunk after the first (ITL = successive gaps,
    # starting from first_token_at). Chunks, not tokens: a chunk may hold several.
    # A list while streaming; the run's collector packs finished ones into array('d').
    chunk_times: MutableSequence[float] = field(default_factory=list)
    prompt_tokens: int = 0  # from the server's usage (fallback: tokenizer)
    completion_tokens: int = 0  # from the server's usage (fallback: tokenizer)
    tokens_from_usage: bool = True
    finish_reason: str | None = None
    status: int | None = None  # HTTP status; None when no response arrived
    error_class: str | None = None  # None on success, else e.g. "http_500", "timeout", "cancelled"
    error: str | None = None
    scenario_tag: str | None = None  # which scenario stream produced it (e.g. "doc-3")
    # A mixture's class (``workload.mix[].name``); None outside a mixture.
    request_class: str | None = None
    # A session workload's conversation id and this request's turn in it (1-based).
    session: int | None = None
    turn: int | None = None
    # Prompt tokens the server served from its prefix cache, as its usage reports them
    # (``usage.prompt_tokens_details.cached_tokens``; vLLM: --enable-prompt-tokens-details).
    # None when the server does not say.
    cached_tokens: int | None = None
    # A reasoning model's answer (``delta.reasoning`` / ``delta.reasoning_content`` before
    # ``delta.content``): when the first answer chunk came, and how many of
    # ``completion_tokens`` were thinking. None when the stream carried no reasoning.
    first_answer_at: float | None = None
    reasoning_tokens: int | None = None
    # Where ``reasoning_tokens`` came from: the server's usage
    # (``completion_tokens_details.reasoning_tokens``: True) or the tokenizer (False).
    reasoning_from_usage: bool | None = None
    # The LoRA adapter the request was sent to (its ``model``), when the scenario sends
    # to adapters; None otherwise.
    adapter: str | None = None
    # How many images the request carried (their size is the scenario's); None: none.
    images: int | None = None
    # Where the TTFT went, on the client's side (``core.figures.phases``): the run-axis
    # times at which the request got its connection slot after waiting for one, its host's
    # name was resolved, its new connection was ready (TCP, and TLS for https), its
    # request was written, and the response's headers came. None where the phase did not
    # happen (no wait, a reused connection, a cached name) or was not measured.
    slot_at: float | None = None
    dns_at: float | None = None
    connected_at: float | None = None
    request_sent_at: float | None = None
    headers_at: float | None = None
    # The answer's text, kept only when the run was asked to (`--save-generated-texts`);
    # not recorded in recordings.
    generated_text: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def client_queue_s(self) -> float:
        """Time spent waiting for a concurrency slot (recorded apart from TTFT)."""
        return max(0.0, self.sent_at - self.scheduled_at)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.sent_at

    @property
    def ttfa(self) -> float | None:
        """Time to the first answer token: the TTFT when the request did not reason, None
        when it reasoned and no answer came (cut short while thinking)."""
        if self.first_answer_at is not None:
            return self.first_answer_at - self.sent_at
        if self.reasoning_tokens:
            return None
        return self.ttft

    @property
    def answer_tokens(self) -> int:
        """The completion tokens that were the answer, not thinking."""
        return max(0, self.completion_tokens - (self.reasoning_tokens or 0))

    @property
    def e2e(self) -> float:
        return self.end_at - self.sent_at

    @property
    def tpot(self) -> float | None:
        if self.first_token_at is None or self.completion_tokens <= 1:
            return None
        return (self.end_at - self.first_token_at) / (self.completion_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The kinds of failure the screen tells apart, from the server's side: it answered with an
# error status (http), answered too slowly (timeout), could not be reached or dropped the
# connection (connection), or answered something that is not a valid stream (protocol).
ERROR_GROUPS = ("http", "timeout", "connection", "protocol")
_ERROR_GROUP_OF = {
    "timeout": "timeout",
    "connect": "connection",
    "stream_aborted": "connection",  # the body broke off before [DONE]: the connection went
    "stream_error": "protocol",
    # The client failed on what the server sent (an unexpected exception while streaming).
    "client_error": "protocol",
}
# The client's own failure, in no server group: it could not open a connection as it ran out
# of file descriptors (EMFILE, ENFILE; loadgen.transport.open_files). Counted as failed, never as the
# server's connection error (which would make the header say SERVER DOWN).
CLIENT_LIMIT = "client_limit"


def error_group(error_class: str | None) -> str | None:
    """Which of ``ERROR_GROUPS`` a request's ``error_class`` falls in: None for a success
    and for ``cancelled`` (the run ended it, not the server); an unknown class (a newer
    client's) counts as a protocol failure."""
    if error_class is None or error_class in ("cancelled", CLIENT_LIMIT):
        return None
    if error_class.startswith("http_"):
        return "http"
    return _ERROR_GROUP_OF.get(error_class, "protocol")


@dataclass(slots=True)
class ServerSample:
    """One ``/metrics`` scrape of one URL, normalised across server kinds.

    Gauges are instantaneous; ``*_total`` fields are monotonic counters as exported
    (reset handling happens downstream, on successive samples). ``None`` = not exported.
    """

    t: float
    url: str
    ok: bool
    backend: str = "unknown"  # "vllm", "vllm-legacy", "sglang", "tgi", "llamacpp", "unknown"
    error: str | None = None
    scrape_s: float = 0.0
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None  # 0..1
    prompt_tokens_total: float | None = None  # every prompt token, prefix-cache hits included
    # Prompt tokens the server computed (prefix-cache hits excluded): what vLLM's own
    # "Avg prompt throughput" log line counts (vLLM: prompt_tokens_by_source{local_compute}).
    prompt_tokens_computed_total: float | None = None
    generation_tokens_total: float | None = None
    prefix_queries_total: float | None = None
    prefix_hits_total: float | None = None
    preemptions_total: float | None = None
    # Speculative decoding (vLLM: vllm:spec_decode_num_drafts / _num_draft_tokens /
    # _num_accepted_tokens), and accepted tokens by draft position, {"0": n, "1": n, …}.
    spec_drafts_total: float | None = None
    spec_draft_tokens_total: float | None = None
    spec_accepted_tokens_total: float | None = None
    spec_accepted_by_position: dict[str, float] = field(default_factory=dict)
    # The multimodal processor cache (vLLM: vllm:mm_cache_queries / vllm:mm_cache_hits).
    mm_cache_queries_total: float | None = None
    mm_cache_hits_total: float | None = None
    # LoRA adapters (vLLM: vllm:lora_requests_info's labels, its newest series): those
    # running and waiting, and the most the server holds at once (--max-loras).
    # None when not exported.
    lora_running: list[str] | None = None
    lora_waiting: list[str] | None = None
    max_lora: float | None = None
    # Same fields per data-parallel engine label, e.g. {"0": {"running": 3.0, ...}}.
    per_engine: dict[str, dict[str, float]] = field(default_factory=dict)
    # Counter identity (e.g. a `_created` timestamp); a change means the server restarted.
    created: float | None = None
    # The raw vLLM families read, as {metric_name_with_labels: value}; kept for the recording.
    raw: dict[str, float] = field(default_factory=dict)
    # A GPU sample's (``backend`` in GPU_BACKENDS) gauges per GPU: {"0": {"power_w": 312.0, ...}},
    # keys from GPU_FIELDS. Added later: samples of older recordings lack it ({}).
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)
    # Series of the page left out, {series: reason}: NaN, infinite or negative values, or a
    # series given twice (scrape.screen_samples). Added later: older recordings lack it ({}).
    rejected: dict[str, str] = field(default_factory=dict)

    @property
    def is_gpu(self) -> bool:
        """A GPU telemetry sample (NVML, a DCGM exporter), not the server's own /metrics."""
        return self.backend in GPU_BACKENDS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Where GPU samples come from: NVML on this host, or a DCGM exporter's /metrics page. A GPU
# sample is a ServerSample with one of these backends (failed ones too), so it is scraped,
# recorded, replayed and reported failing the way a server's /metrics is.
GPU_BACKENDS = ("nvml", "dcgm")
# One GPU's gauges (ServerSample.gpus) and their units: utilisation % (0..100, the share of
# the sample period a kernel ran), framebuffer memory used and free in MiB, power in W, SM
# clock in MHz. A source may lack some (then absent from the dict).
GPU_FIELDS = ("util_pct", "mem_used_mib", "mem_free_mib", "power_w", "sm_clock_mhz")


@dataclass(slots=True)
class Tick:
    """Once per second: what the schedule asked for and what the run is doing."""

    t: float
    target_rps: float
    state: str  # "ramping", "holding", "stopping", "done"
    in_flight: int = 0
    client_queued: int = 0
    # Requests scheduled / actually sent since the run started. Records only arrive when
    # a request ends, so these are what the offered and sent rates are drawn from live.
    offered_total: int | None = None
    sent_total: int | None = None
    # Added later; ticks of older recordings lack them (None):
    # the most requests in flight at any moment so far (exact, not sampled at ticks),
    peak_in_flight: int | None = None
    # when the oldest request still in flight was sent (None: none in flight),
    oldest_sent_at: float | None = None
    # when the schedule will end as it stands now: the planned duration moved on by the
    # time spent holding (None: unbounded, e.g. a request count without a duration).
    planned_end_s: float | None = None
    # A session workload (``loadgen.workload.sessions``): sessions under way, and started / ended
    # since the run started (0 in other runs and in older recordings).
    active_sessions: int = 0
    sessions_started_total: int = 0
    sessions_finished_total: int = 0
    # The client's self-check (``loadgen.run.loop_health``; None in older recordings): its
    # event loops' lag samples since the previous tick as ``[[bucket, count], …]`` and
    # the largest of them (ms), and its garbage collections so far, every load process's.
    loop_lag: list[list[int]] | None = None
    loop_lag_max_ms: float | None = None
    client_counts: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


EVENT_KINDS = (
    "start",
    "stop",
    "hold",
    "resume",
    "set_rate",
    "mark",
    "knee",
    "error",
    "scrape_error",
    "cancel",  # in-flight requests cancelled: by the user ending the drain, or after a stop's grace period
    "info",
    # The server was restarted with other arguments (``data``: ``command``, the new serve
    # command redacted; ``diff``, [[name, old, new], …] against the previous one; ``resume``,
    # "start" or "current"; ``restart_started_at``, when the load stopped for it). The
    # requests sent from here on belong to the new configuration (``core.figures.segments``).
    "config",
    # rampwatch search's steps (``data["search"]``: start, window, bracket, hold, verdict,
    # result; ``loadgen.run.search_control``).
    "search",
)

# A request cancelled by the run (a stop's grace period over, the user ending the drain):
# neither completed nor failed; counted apart everywhere.
CANCELLED = "cancelled"


@dataclass(slots=True)
class Event:
    t: float
    kind: str  # one of EVENT_KINDS
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class RunHeader:
    """What a recording's header holds. Never contains secrets."""

    rampwatch_version: str
    started_at_unix: float
    target: str
    model: str
    scenario_name: str
    scenario: dict[str, Any] = field(default_factory=dict)  # resolved scenario
    options: dict[str, Any] = field(default_factory=dict)  # CLI options, secrets removed
    planned_duration_s: float | None = None
    server_info: dict[str, Any] = field(default_factory=dict)  # /v1/models, /version, cache_config
    host_info: dict[str, Any] = field(default_factory=dict)
    metrics_urls: list[str] = field(default_factory=list)
    # Where GPU telemetry is read: "nvml" and/or DCGM exporter URLs (redacted). Added
    # later: headers of older recordings lack it ([]).
    gpu_sources: list[str] = field(default_factory=list)
    # The DCGM page read is the embedded simulator's: its GPU figures are modelled, not
    # measured. Added later: older recordings lack it (False).
    gpu_simulated: bool = False
    # The run's prefix-cache policy (core.cache_salt: AUTO, NONE or FIXED, from
    # --cache-salt) and the ``cache_salt`` every request carried (None: none). Added
    # later: older recordings lack them (policy None: unknown).
    cache_salt_policy: str | None = None
    cache_salt: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class TimelineSink(Protocol):
    """Everything a run publishes goes through this: ``loadgen.run.runner.Run`` calls one
    ``FanoutSink`` of its ``SeriesBuilder``, its ``RunCollector`` and the sinks it was
    given, in that order (the recorder, ``record.writer.RecordingWriter``; under the UI,
    ``app.bridge.ItemForwarder``).

    **Thread.** Every call is made on the run's event loop thread (under the UI, in the
    forked run process), by the run's tasks: the dispatcher and each request's task, the
    tick loop, the ``/metrics`` and NVML pollers (their pages are parsed in threads, the
    samples published on the loop) and the steering calls. Records of requests sent by
    worker processes or Ray actors are published there when they come back. A sink needs
    no lock but for work it hands to a thread of its own (the recorder's
    ``rampwatch-recorder`` thread encodes and writes what the calls appended under a
    lock). The UI process gets the items later, in the same order: its pipe-reader
    thread feeds them to a mirror ``SeriesBuilder`` (``app.bridge.feed_items``).

    **Order.** ``on_start`` once, first; the ``start`` event and a first tick at t = 0;
    then requests, samples, ticks and events as they happen on the loop; after the
    drain, a last tick (state ``done``), the knee's pending review, the ``stop`` event
    and ``on_finish``, once, last. Within a kind, times do not go back (ticks every
    ``tick_interval_s``; a URL's samples in scrape order), but across kinds the stream is
    only roughly in time order: a record comes when its request ends (``end_at``; a
    worker's a little later), a sample once its page is parsed (``t``: when it was read),
    the knee's events once the second they describe is complete. Whoever needs time
    order buffers a few seconds (the recorder's checkpoints lag 5 s); a replay feeds a
    recording's items back sorted by time (``record.reader``). A run that fails with an
    exception publishes nothing more and never calls ``on_finish``: whoever made a sink
    closes it (``RecordingWriter.close``).

    **A sink never raises** and costs the loop microseconds: it copies or buffers and
    does heavy work elsewhere. An exception goes into the run's code that called it: the
    run fails (``on_start``, the start's and the end's items), a request's task ends
    (``on_request``), ticks and knee detection stop (``on_tick``), a steering call fails;
    only the pollers log a failing ``on_scrape`` and go on; in a ``FanoutSink`` the sinks
    after the failing one miss the item. So a sink keeps its failures to itself (the
    recorder stops recording and says why in ``RecordingWriter.error``). By design,
    ``on_start`` alone may raise ``UserError`` to refuse the run before any request is
    sent (the recorder cannot create its file).
    """

    def on_start(self, header: RunHeader) -> None:
        """The header, once, first: after the start's checks, before the first send."""

    def on_request(self, record: RequestRecord) -> None:
        """A request's record when it ends (success, failure or cancel; a client bug gives
        a ``client_error`` record), once per request. Every sink gets the same object: keep
        it, never change it."""

    def on_scrape(self, sample: ServerSample) -> None:
        """A ``/metrics`` scrape (one per URL per poll, failed ones too) or a GPU read."""

    def on_tick(self, tick: Tick) -> None:
        """The run's state at t = 0, every ``tick_interval_s`` (1 s), and a last one."""

    def on_event(self, event: Event) -> None:
        """Start and stop, steering (one that changed nothing is not published), scrape
        failures and recoveries, the knee and its review, errors and notes."""

    def on_finish(self, t: float) -> None:
        """The run's end at run time ``t``, once, last; not called when the run fails."""


class NullSink:
    def on_start(self, header: RunHeader) -> None:
        pass

    def on_request(self, record: RequestRecord) -> None:
        pass

    def on_scrape(self, sample: ServerSample) -> None:
        pass

    def on_tick(self, tick: Tick) -> None:
        pass

    def on_event(self, event: Event) -> None:
        pass

    def on_finish(self, t: float) -> None:
        pass


class FanoutSink(NullSink):
    """Sends every item to several sinks, in order (an exception from one stops the item
    there: sinks never raise, see ``TimelineSink``)."""

    def __init__(self, *sinks: TimelineSink) -> None:
        self.sinks = list(sinks)

    def on_start(self, header: RunHeader) -> None:
        for s in self.sinks:
            s.on_start(header)

    def on_request(self, record: RequestRecord) -> None:
        for s in self.sinks:
            s.on_request(record)

    def on_scrape(self, sample: ServerSample) -> None:
        for s in self.sinks:
            s.on_scrape(sample)

    def on_tick(self, tick: Tick) -> None:
        for s in self.sinks:
            s.on_tick(tick)

    def on_event(self, event: Event) -> None:
        for s in self.sinks:
            s.on_event(event)

    def on_finish(self, t: float) -> None:
        for s in self.sinks:
            s.on_finish(t)


# Names of the 1-second series a Snapshot carries (all lists aligned with `Snapshot.times`).
# NaN marks "no data" (e.g. no /metrics, or no completed request in the window).
SERIES_NAMES = (
    "target_rps",  # schedule's rate (from ticks)
    "offered_rps",  # requests scheduled in the second
    "sent_rps",  # requests actually sent in the second
    "completed_rps",  # requests finished OK in the second
    "error_rps",  # requests failed in the second
    "client_output_tps",  # completion tokens of requests finished in the second / 1 s
    "server_prompt_tps",  # Δ prompt_tokens_total / Δt
    "server_generation_tps",  # Δ generation_tokens_total / Δt
    "running",
    "waiting",
    "kv_usage_pct",  # 0..100
    "prefix_hit_pct",  # Δhits/Δqueries over the window, 0..100
    "preemptions",  # Δ preemptions in the second
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "itl_p50",
    "itl_p90",
    "itl_p99",
    "in_flight",
    # Failed requests per second by ERROR_GROUPS class (cancelled ones in none of them).
    "errors_http_rps",
    "errors_timeout_rps",
    "errors_connection_rps",
    "errors_protocol_rps",
    "client_queued",  # requests waiting for a --max-concurrency slot (from ticks)
    # GPU telemetry (NVML or DCGM), the last good GPU sample in the second; NaN without one.
    "gpu_util_pct",  # mean over the GPUs, 0..100
    "gpu_power_w",  # sum over the GPUs
    "gpu_mem_used_gib",  # sum over the GPUs
    "gpu_sm_clock_mhz",  # mean over the GPUs
    # A session workload (from ticks; 0 in other runs): sessions under way at the second's
    # last tick, and sessions started / ended in the second.
    "sessions_active",
    "sessions_started_per_s",
    "sessions_finished_per_s",
    # The longest delay of the client's own event loops in the second, ms (from ticks;
    # NaN in older recordings): a latency figure can hold up to this much of the client.
    "client_lag_ms",
)

GPU_SERIES = ("gpu_util_pct", "gpu_power_w", "gpu_mem_used_gib", "gpu_sm_clock_mhz")

ERROR_SERIES = {group: f"errors_{group}_rps" for group in ERROR_GROUPS}


@dataclass(slots=True)
class ScrapeErrorLine:
    """One distinct ``/metrics`` failure (URL and reason) and how often it happened."""

    url: str
    message: str  # one line, already redacted (``loadgen.server.scrape``)
    count: int
    first_t: float
    last_t: float
    gpu: bool = False  # a GPU telemetry source's failure (NVML, a DCGM exporter), not the server's


def metrics_stale_after_s(header: RunHeader | None) -> float:
    """How long after the last good ``/metrics`` scrape the server's figures count as
    stale: three scrape intervals (``--scrape-interval``), never under 3 s, so one slow or
    failed scrape does not blink the screen."""
    interval = (header.options.get("scrape_interval") if header else None) or 1.0
    try:
        return max(3.0, 3.0 * float(interval))
    except (TypeError, ValueError):
        return 3.0


@dataclass(slots=True)
class StepRow:
    """One row of the per-step results table (``core.figures.steps``): a stretch of the run at
    one target rate (a step, a hold, a manual rate), a tenth of a ramp, or the drain
    after a stop. Latencies, errors and the achieved rate belong to the requests *sent*
    in the row (the load it offered, whenever those requests end); the completion rate
    to those that *ended* in it and output tokens to those streamed in it (what the
    server delivered meanwhile). Latencies are seconds; NaN/None when there is nothing yet."""

    index: int  # 1, 2, … in time order
    kind: str  # "step", "ramp", "hold", "rate" (a manual rate), "drain"
    start_s: float
    end_s: float  # the next row's start, or the latest time seen for the last row
    target_lo_rps: float  # the row's target rate: one value, or the range a ramp slice covers
    target_hi_rps: float
    sent: int
    errors: int  # of the requests sent in the row
    succeeded: int  # requests sent in the row that ended OK (so far: see ``pending``)
    cancelled: int  # requests sent in the row that the run cancelled (neither OK nor failed)
    completed: int  # requests that ended OK in the row, whenever sent
    achieved_rps: float  # succeeded / row length: comparable with the target rate (NaN: the drain)
    completed_rps: float  # completed / row length: what ended meanwhile, behind the sends by an E2E latency
    output_tps: float  # output tokens streamed in the row (by chunk arrival) / row length
    pending: bool  # some requests sent in the row may be in flight still: achieved is a lower bound
    ttft_p50: float
    ttft_p99: float
    itl_p50: float
    itl_p99: float
    kv_max_pct: float | None  # from /metrics scrapes in the row (None: no usable scrape)
    kv_mean_pct: float | None
    waiting_max: float | None
    # A reasoning run's time to first answer p99 (seconds, NaN: none yet); None in a plain run.
    ttfa_p99: float | None = None
    # Speculative decoding over the row's scrapes (accepted / drafted tokens, %, and 1 +
    # accepted per draft); None where the server does not speculate.
    spec_acceptance_pct: float | None = None
    spec_accept_len: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The 1-second series of each class of a mixture (``Snapshot.classes``), aligned with
# ``Snapshot.times`` like the run's own; ``good_rps`` is the requests that ended in the
# second within the class's SLO (NaN throughout when it has none).
CLASS_SERIES_NAMES = (
    "sent_rps",
    "completed_rps",
    "error_rps",
    "good_rps",
    "client_output_tps",
    "ttft_p50",
    "ttft_p90",
    "ttft_p99",
    "itl_p50",
    "itl_p90",
    "itl_p99",
    "e2el_p50",
    "e2el_p90",
    "e2el_p99",
)


@dataclass(slots=True)
class ClassFigures:
    """One class of a mixture so far: its series and its run-so-far summary (the run
    summary's keys, over the class's requests only, judged by the class's SLO)."""

    name: str
    series: dict[str, list[float]]  # CLASS_SERIES_NAMES -> values aligned with Snapshot.times
    summary: dict[str, Any]


@dataclass(slots=True)
class Snapshot:
    """Everything the UI draws at time ``t``; built the same way live and in replay."""

    t: float
    header: RunHeader | None
    state: str
    target_rps: float
    times: list[float]  # bin start times (seconds since start), one per second
    series: dict[str, list[float]]  # SERIES_NAMES -> values aligned with times
    in_flight: int
    events: list[Event]
    summary: dict[str, Any]  # run-so-far figures (same keys as the headless summary)
    server_metrics_available: bool
    # When the newest good /metrics scrape (of any URL) ended; None before the first one.
    last_good_scrape_t: float | None = None
    # Every distinct /metrics failure so far, in order of their last occurrence.
    scrape_errors: list[ScrapeErrorLine] = field(default_factory=list)
    planned_duration_s: float | None = None  # the current plan (see Tick.planned_end_s), else the header's
    oldest_in_flight_sent_at: float | None = None  # Tick.oldest_sent_at of the latest tick
    steps: list[StepRow] = field(default_factory=list)  # the per-step results table so far
    # Each GPU's latest gauges ({"0": {"power_w": ...}}, keys "<source>:<gpu>" with several
    # sources); empty when the run has no GPU telemetry: the GPU panel is then hidden.
    gpus: dict[str, dict[str, float]] = field(default_factory=dict)
    last_good_gpu_t: float | None = None  # when the newest good GPU sample was taken
    # After a server restart: the configurations side by side so far
    # (``core.figures.segments.SegmentTable``); None while the run has one configuration.
    configurations: Any = None
    # A mixture's classes in the scenario's order (``workload.mix``); empty otherwise.
    classes: list[ClassFigures] = field(default_factory=list)
    # A session workload's figures by turn index so far (``core.figures.turns.TurnTable``);
    # None when no request of the run had a turn.
    turns: Any = None
    # The server's LoRA adapters at its newest scrape (``core.figures.adapters.lora_state``:
    # running, waiting, max_lora); None where it exports none.
    lora: dict[str, Any] | None = None
    # A reasoning run's series aligned with ``times`` (``core.figures.series_reasoning``:
    # ttfa_p50/p90/p99 in s, reasoning_share_pct); None when no request reasoned.
    reasoning: dict[str, list[float]] | None = None

    @classmethod
    def empty(cls, state: str = "starting") -> Snapshot:
        """Before the first data: what the UI shows while a run starts or a replay opens."""
        return cls(
            t=0.0,
            header=None,
            state=state,
            target_rps=0.0,
            times=[],
            series={},
            in_flight=0,
            events=[],
            summary={},
            server_metrics_available=True,
        )
