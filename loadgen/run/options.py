"""What a run is asked to do besides its scenario: the target, its connection, scrapes,
timeouts, the drain, GPU telemetry, load workers (``RunOptions``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rampwatch.core.cache_salt import NONE
from rampwatch.core.figures.search import SearchPlan
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.loadgen.run.drain import DrainPolicy
from rampwatch.loadgen.run.workers import SenderFactory
from rampwatch.loadgen.server.scrape import DEFAULT_MAX_BODY_BYTES
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.transport.server_probe import ModelsAnswer


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
    # Lines on what the run's server was started with, each an info event at the start
    # (the embedded simulator's additions for the scenario: app.session.embedded_sim).
    server_notes: tuple[str, ...] = ()
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
    # rampwatch search: the run's schedule is steered to the max load under an SLO.
    search: SearchPlan | None = None
