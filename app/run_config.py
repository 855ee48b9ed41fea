"""`rampwatch run`'s configuration: one typed ``RunConfig`` that owns the command's flags
(``add_cli_args``), built once from the parsed command line (``from_cli_args``) or
directly (the start screen), and read by everything downstream of `app.run`.

A field is named as its flag's ``dest`` (``--metrics-url`` → ``metrics_url``): the
recording's header keeps the options under those names (``recorded_options``), and
`rampwatch report`, replay and the live screen read them back so.

Imported by the CLI to build `rampwatch run`'s parser, and by the start screen.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, TextIO

from rampwatch.app import credentials
from rampwatch.app.ray_run import add_ray_flags
from rampwatch.core.errors import UserError
from rampwatch.core.figures.search import SearchPlan
from rampwatch.core.redact import REDACTED, redact_value
from rampwatch.loadgen.run.drain import DrainPolicy, parse_drain
from rampwatch.loadgen.run.ray_workers import DEFAULT_MAX_CLOCK_OFFSET_MS
from rampwatch.loadgen.server.managed import DEFAULT_STARTUP_TIMEOUT_S
from rampwatch.loadgen.server.scrape import DEFAULT_MAX_BODY_BYTES

DEFAULT_PROGRESS_INTERVAL_S = 5.0
DEFAULT_METRICS_MAX_BYTES = DEFAULT_MAX_BODY_BYTES
DEFAULT_SIM_HARDWARE = "l4"
DEFAULT_SIM_MODEL = "llama-3.1-8b-fp8"
DEFAULT_MAX_ERROR_RATE = 0.05
DEFAULT_REQUEST_TIMEOUT_S = 600.0
DEFAULT_STOP_GRACE_S = 10.0
DEFAULT_PROMETHEUS_HOST = "127.0.0.1"
MAX_REPEATS = 20  # --repeats (app.repeats), as a sweep's repeats:
DEFAULT_COOL_DOWN_S = 10.0
# After the run, --prometheus-port serves on until a scrape reads its final figures, at most
# this long: two of Prometheus' usual 15 s scrape intervals (one scrape may fail or be late).
DEFAULT_PROMETHEUS_LINGER_S = 30.0
GPU_MODES = ("auto", "nvml", "sim", "off")  # --gpu (app.session.plan.gpu_telemetry)
# The environment variable a run's API key defaults to (as `vllm bench serve` reads it).
API_KEY_ENV = credentials.API_KEY_ENV


def _number(kind: type, test: Callable[[Any], bool], wanted: str) -> Callable[[str], Any]:
    """An argparse type: a number of ``kind`` that passes ``test``, else a one-line error
    saying what was wanted (argparse names the flag)."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if value != value or not test(value):  # NaN passes no test
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    parse.__name__ = wanted  # argparse shows it in some messages
    return parse


positive_float = _number(float, lambda v: 0 < v < float("inf"), "a number above 0")
non_negative_float = _number(float, lambda v: 0 <= v < float("inf"), "a number ≥ 0")
fraction = _number(float, lambda v: 0 <= v <= 1, "a fraction from 0 to 1")
positive_int = _number(int, lambda v: v > 0, "a whole number above 0")
repeat_count = _number(int, lambda v: 1 <= v <= MAX_REPEATS, f"a whole number from 1 to {MAX_REPEATS}")
port_number = _number(int, lambda v: 0 < v < 65536, "a port from 1 to 65535")


def drain_policy(text: str) -> DrainPolicy:
    """An argparse type for ``--drain``: wait, cap:SECONDS or cancel."""
    try:
        return parse_drain(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass(frozen=True)
class RunConfig:
    """Every flag of `rampwatch run`, typed, with the flag's default. Lists of repeatable
    flags are tuples (the configuration is built once and not changed: a changed copy is
    ``dataclasses.replace``)."""

    scenario: str
    target: str | None = None
    serve: str | None = None
    serve_timeout: float = DEFAULT_STARTUP_TIMEOUT_S
    server_log: str | None = None
    model: str | None = None
    headless: bool = False
    detach: bool = False
    on_hangup: str = "detach"
    run_id: str | None = None  # given by --detach to the process it starts, else by app.run
    detached_log: str | None = None
    no_mouse: bool = False
    duration: float | None = None
    start_rps: float | None = None
    end_rps: float | None = None
    seed: int | None = None
    cache_salt: str = "auto"
    max_concurrency: int | None = None
    metrics_url: tuple[str, ...] = ()
    gpu_metrics_url: tuple[str, ...] = ()
    gpu: str = "auto"
    scrape_interval: float = 1.0
    metrics_max_bytes: int = DEFAULT_METRICS_MAX_BYTES
    tokenizer: str | None = None
    api_key: str | None = None
    api_key_file: str | None = None
    header: tuple[tuple[str, str], ...] = ()  # (name, value), in order; resolved: every source's
    header_file: str | None = None
    insecure: bool = False
    ca_cert: str | None = None
    result_json: str | None = None
    save_detailed: bool = False
    save_generated_texts: bool = False
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    gpu_price_per_hour: float | None = None
    record: str | None = None
    no_record: bool = False
    force: bool = False
    set: tuple[str, ...] = ()  # KEY=VALUE scenario overrides
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL_S
    rate_step: float | None = None
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    stop_grace: float = DEFAULT_STOP_GRACE_S
    drain: DrainPolicy | None = None  # None: the scenario's drain:, else wait
    workers: int | None = None
    sim_hardware: str = DEFAULT_SIM_HARDWARE
    sim_model: str | None = None  # None: DEFAULT_SIM_MODEL, or the image preset for a scenario with images
    ray: str | None = None
    max_clock_offset: float = DEFAULT_MAX_CLOCK_OFFSET_MS
    prometheus_port: int | None = None  # serve the run's own figures (loadgen.run.prometheus_target)
    prometheus_host: str = DEFAULT_PROMETHEUS_HOST
    prometheus_linger: float = DEFAULT_PROMETHEUS_LINGER_S  # after the run, until a scrape reads its end
    repeats: int = 1  # --repeats N (app.repeats); a repeat's own run: repeat is its number, 1-based
    cool_down: float = DEFAULT_COOL_DOWN_S
    same_prompts: bool = False
    repeat: int | None = None
    # rampwatch search (app.search): the run searches the max load under an SLO.
    search: SearchPlan | None = None
    # What was typed (not a flag): --detach starts the same command in the background.
    argv: tuple[str, ...] = field(default=(), compare=False)

    def __repr__(self) -> str:
        """Never a secret (a repr reaches logs and tracebacks): the API key and every header
        value starred, secret flags' values in what was typed and in ``--serve`` starred, URL
        credentials masked."""
        shown = []
        for f in fields(self):
            value: Any = getattr(self, f.name)
            if f.name == "api_key" and value:
                value = REDACTED
            elif f.name == "header":
                value = tuple((name, REDACTED) for name, _ in value)
            elif f.name == "serve" and isinstance(value, str):
                try:
                    value = shlex.join(redact_value(shlex.split(value)))
                except ValueError:  # unbalanced quotes: nothing of it is shown
                    value = REDACTED
            else:
                value = redact_value(value)
            shown.append(f"{f.name}={value!r}")
        return f"RunConfig({', '.join(shown)})"

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        """`rampwatch run`'s flags, each with its field's default."""
        parser.add_argument("scenario", metavar="SCENARIO", help="scenario name (chat, classification, …) or YAML path")
        parser.add_argument(
            "--target",
            metavar="URL",
            help="server base URL, e.g. http://127.0.0.1:8000 (default: the --serve command's --host/--port, "
            "else start the embedded simulator)",
        )
        parser.add_argument(
            "--serve",
            metavar="COMMAND",
            help='start this server, wait until it serves, run, stop it: e.g. --serve "vllm serve MODEL '
            '--max-num-seqs 64" (rampwatch connects to its --host/--port unless --target is given)',
        )
        parser.add_argument(
            "--serve-timeout",
            type=positive_float,
            default=DEFAULT_STARTUP_TIMEOUT_S,
            metavar="SECONDS",
            help=f"how long the --serve server may take to serve (default {DEFAULT_STARTUP_TIMEOUT_S:g})",
        )
        parser.add_argument(
            "--server-log",
            metavar="PATH",
            help="the started server's log (default: RECORDING.server.log beside the recording)",
        )
        parser.add_argument("--model", metavar="NAME", help="model name to request (default: the server's first model)")
        parser.add_argument("--headless", action="store_true", help="no UI: progress lines and a final summary")
        parser.add_argument(
            "--detach",
            action="store_true",
            help="run in the background (its own session; output to a log beside the recording): prints the run's "
            "id and exits; watch it with `rampwatch attach ID`, stop it with `rampwatch stop ID`",
        )
        parser.add_argument(
            "--on-hangup",
            choices=("detach", "stop"),
            default="detach",
            help="live screen: when its terminal closes (SIGHUP), detach = the run goes on in the background "
            "(attach to it again), stop = drain and stop it (default detach; a headless run always stops)",
        )
        parser.add_argument("--run-id", help=argparse.SUPPRESS)  # given by --detach to the process it starts
        parser.add_argument("--detached-log", help=argparse.SUPPRESS)
        parser.add_argument(
            "--no-mouse",
            action="store_true",
            help="live screen: leave the mouse to the terminal, so text can be selected (over SSH too); c toggles it",
        )
        parser.add_argument(
            "--duration",
            type=positive_float,
            metavar="SECONDS",
            help="ramp duration (schedule.duration_s; default: the scenario's)",
        )
        parser.add_argument("--start-rps", type=non_negative_float, metavar="R", help="rate at the start of the ramp")
        parser.add_argument("--end-rps", type=non_negative_float, metavar="R", help="rate at the end of the ramp")
        parser.add_argument("--seed", type=int, metavar="N", help="seed for arrivals and prompts")
        parser.add_argument(
            "--cache-salt",
            default="auto",
            metavar="auto|none|SALT",
            help="vLLM cache_salt in every request: auto (default) a fresh one per run, so a repeat run never reads "
            "an earlier run's prompts from the prefix cache; none: no salt; SALT: this one (runs with it share the cache)",
        )
        parser.add_argument(
            "--max-concurrency",
            type=positive_int,
            metavar="N",
            help="cap on requests in flight (the wait is recorded as client queue time)",
        )
        parser.add_argument(
            "--metrics-url",
            action="append",
            metavar="URL",
            default=[],
            help="server /metrics URL to poll (repeatable; default: TARGET/metrics)",
        )
        parser.add_argument(
            "--gpu-metrics-url",
            action="append",
            metavar="URL",
            default=[],
            help="a DCGM exporter's /metrics to read GPU utilisation, memory, power and SM clock from "
            "(repeatable; polled with the server's /metrics)",
        )
        parser.add_argument(
            "--gpu",
            choices=GPU_MODES,
            default="auto",
            help="GPU telemetry on this host: auto = NVML when the target is on this host (not the embedded "
            "simulator) and no --gpu-metrics-url is given; nvml = NVML always; sim = the embedded simulator serves "
            "simulated GPU gauges; off = none (default auto; --gpu-metrics-url is read in every mode)",
        )
        parser.add_argument(
            "--scrape-interval",
            type=positive_float,
            default=1.0,
            metavar="SECONDS",
            help="how often /metrics and the GPU telemetry pages are read (default 1)",
        )
        parser.add_argument(
            "--metrics-max-bytes",
            type=positive_int,
            default=DEFAULT_METRICS_MAX_BYTES,
            metavar="N",
            help="a /metrics body larger than this fails its scrape instead of being read "
            f"(default {DEFAULT_METRICS_MAX_BYTES:,})",
        )
        parser.add_argument(
            "--tokenizer",
            metavar="NAME_OR_PATH",
            help="HF tokenizer for exact prompt lengths (default: the simulator's)",
        )
        credentials.add_flags(parser, headers=True)
        tls = parser.add_mutually_exclusive_group()
        tls.add_argument("--insecure", action="store_true", help="do not verify the server's TLS certificate")
        tls.add_argument("--ca-cert", metavar="PEM", help="verify the server's TLS certificate against this CA file")
        parser.add_argument(
            "--result-json",
            metavar="PATH",
            help="write a vllm-bench-style result JSON here (default: beside the recording)",
        )
        parser.add_argument(
            "--save-detailed",
            action="store_true",
            help="add the per-request lists (input_lens, output_lens, start_times, ttfts, itls, generated_texts, "
            "errors) to the result JSON, as `vllm bench serve --save-detailed` does",
        )
        parser.add_argument(
            "--save-generated-texts",
            action="store_true",
            help="keep each answer's text for the result JSON's generated_texts (implies --save-detailed; "
            "costs memory for every answer until the run ends)",
        )
        parser.add_argument(
            "--max-error-rate",
            type=fraction,
            default=0.05,
            metavar="F",
            help="exit 1 when the failed fraction of requests exceeds F (default 0.05)",
        )
        parser.add_argument(
            "--gpu-price-per-hour",
            type=non_negative_float,
            metavar="USD",
            help="add cost per 1M output and total tokens to the summary",
        )
        parser.add_argument(
            "--record", metavar="PATH", help="recording file (default: ./recordings/<time>-<scenario>.rwrec)"
        )
        parser.add_argument("--no-record", action="store_true", help="do not record the session")
        parser.add_argument(
            "--force",
            action="store_true",
            help="replace a recording, result JSON or server log that exists already (never one another run is writing)",
        )
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override any scenario key, e.g. --set workload.output_tokens.max=200 (repeatable)",
        )
        parser.add_argument(
            "--progress-interval",
            type=positive_float,
            default=DEFAULT_PROGRESS_INTERVAL_S,
            metavar="SECONDS",
            help=f"headless: seconds between progress lines (default {DEFAULT_PROGRESS_INTERVAL_S:g})",
        )
        parser.add_argument(
            "--rate-step",
            type=positive_float,
            metavar="RPS",
            help="rate change of the +/- keys (default: about 10%% of the current rate)",
        )
        parser.add_argument(
            "--request-timeout",
            type=positive_float,
            default=600.0,
            metavar="SECONDS",
            help="a request with no end after this long fails as a timeout (default 600)",
        )
        parser.add_argument(
            "--stop-grace",
            type=non_negative_float,
            default=10.0,
            metavar="SECONDS",
            help="after a stop, how long in-flight requests may finish before they are cancelled (default 10)",
        )
        parser.add_argument(
            "--drain",
            type=drain_policy,
            metavar="POLICY",
            help="when the schedule ends: wait for every request in flight (wait, as vllm bench does), "
            "wait at most SECONDS and cancel the rest (cap:SECONDS), or cancel them at once (cancel); "
            "cancelled requests are counted as such and do not make the run interrupted "
            "(default: the scenario's drain:, else wait)",
        )
        load = parser.add_argument_group("load processes")
        load.add_argument(
            "--workers",
            type=positive_int,
            metavar="N",
            help="send from N load processes (this process keeps the schedule, the series and the "
            "recording; request i goes to process i mod N): local processes, or Ray actors with --ray "
            "(default: 1, this process; with --ray, one actor per node with a CPU; see docs/scale.md)",
        )
        parser.add_argument(
            "--sim-hardware",
            default=DEFAULT_SIM_HARDWARE,
            metavar="PRESET",
            help=f"embedded simulator hardware preset (default {DEFAULT_SIM_HARDWARE})",
        )
        parser.add_argument(
            "--sim-model",
            metavar="PRESET",
            help=f"embedded simulator model preset (default {DEFAULT_SIM_MODEL}; qwen2-vl-7b for a scenario with images)",
        )
        add_ray_flags(parser, positive_float)
        prometheus = parser.add_argument_group("Prometheus target")
        prometheus.add_argument(
            "--prometheus-port",
            type=port_number,
            metavar="PORT",
            help="serve the run's own client-side metrics (requests by outcome, TTFT/ITL/E2E histograms, rates, "
            "in flight, send lateness, loop lag) for Prometheus at http://HOST:PORT/metrics while it runs "
            "(default: off; see docs/prometheus.md)",
        )
        prometheus.add_argument(
            "--prometheus-host",
            default=DEFAULT_PROMETHEUS_HOST,
            metavar="HOST",
            help=f"the address --prometheus-port listens on (default {DEFAULT_PROMETHEUS_HOST}: this machine only; "
            "0.0.0.0 for every interface)",
        )
        prometheus.add_argument(
            "--prometheus-linger",
            type=non_negative_float,
            default=DEFAULT_PROMETHEUS_LINGER_S,
            metavar="SECONDS",
            help="after the run, keep serving until one scrape has read its final figures, at most this long "
            f"after its end (default {DEFAULT_PROMETHEUS_LINGER_S:g}; 0: close with the run; Ctrl-C skips)",
        )

        repeats = parser.add_argument_group("repeats")
        repeats.add_argument(
            "--repeats",
            type=repeat_count,
            default=1,
            metavar="N",
            help=f"run it N times (1 to {MAX_REPEATS}), one after another, and report every summary figure, the knee "
            "and the max good-put as the mean ± its 95%% interval over them: a recording per repeat (REC-r1.rwrec …), "
            "the combined result JSON and REC.repeats.json for `rampwatch compare` (default 1)",
        )
        repeats.add_argument(
            "--cool-down",
            type=non_negative_float,
            default=DEFAULT_COOL_DOWN_S,
            metavar="SECONDS",
            help=f"--repeats: pause between repeats (default {DEFAULT_COOL_DOWN_S:g}); against --target, then also "
            "wait (60 s at most) for its /metrics to show nothing running or waiting",
        )
        repeats.add_argument(
            "--same-prompts",
            action="store_true",
            help="--repeats: send the same prompts and arrivals each repeat (default: the seed moves on by one a "
            "repeat, so the server's prefix cache does not favour later repeats)",
        )
        parser.add_argument("--repeat", type=int, help=argparse.SUPPRESS)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> RunConfig:
        """The configuration of a command line parsed with ``add_cli_args``'s flags."""
        values = {f.name: _frozen(getattr(args, f.name)) for f in fields(cls) if f.name not in ("argv", "search")}
        # app.cli adds what was typed; a parser of the flags alone (tests, the sweep) does not
        typed = vars(args).get("argv") or ()
        if values["prometheus_port"] is None and any(a.split("=")[0] == "--prometheus-host" for a in typed):
            # else nothing is served, silently
            raise UserError(f"--prometheus-host {values['prometheus_host']}: needs --prometheus-port PORT")
        if values["repeats"] == 1:
            for flag in ("--cool-down", "--same-prompts"):
                if any(a.split("=")[0] == flag for a in typed):  # else it would do nothing, silently
                    raise UserError(f"{flag}: needs --repeats N (N ≥ 2)")
        if values["prometheus_port"] is None and any(a.split("=")[0] == "--prometheus-linger" for a in typed):
            raise UserError(f"--prometheus-linger {values['prometheus_linger']:g}: needs --prometheus-port PORT")
        return cls(**values, argv=tuple(typed))

    def with_credentials(self, stdin: TextIO | None = None) -> tuple[RunConfig, list[str]]:
        """The key and the headers from every source (``app.credentials``: the flags, their
        files, the environment), and the warnings to print (a secret typed on the command line)."""
        key, headers, warnings = credentials.resolve_secrets(
            self.api_key, self.api_key_file, list(self.header), self.header_file, stdin
        )
        return replace(self, api_key=key, header=tuple(headers or ())), warnings

    def command_line_secrets(self) -> list[str]:
        """What ``credentials.hide_in_process_table`` hides of this run's command line."""
        urls = [self.target, *self.metrics_url, *self.gpu_metrics_url]
        return credentials.command_line_secrets(self.api_key, list(self.header), urls, self.serve)

    def child_environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a process started for this run (--detach's): the key and
        the headers its command line no longer holds."""
        return credentials.child_environment_of(self.api_key, list(self.header), base)

    @property
    def api_key_or_env(self) -> str | None:
        """The run's API key: ``--api-key`` (or its file), else ``$OPENAI_API_KEY``."""
        return self.api_key or os.environ.get(API_KEY_ENV) or None

    def api_key_source(self) -> str:
        """Where the run's API key came from, for a line that says it was refused: a key
        taken silently from the environment may be one meant for another service."""
        if self.api_key_file:
            return f"--api-key-file {self.api_key_file}"
        return "--api-key" if self.api_key else f"${API_KEY_ENV}"

    @property
    def embedded_sim(self) -> bool:
        """No --serve and no --target: the run starts the embedded simulator."""
        return self.serve is None and not self.target

    @property
    def detailed(self) -> bool:
        """The result JSON holds the per-request lists (--save-generated-texts implies them)."""
        return self.save_detailed or self.save_generated_texts

    def scenario_flags(self) -> dict[str, Any]:
        """The flags that override the scenario's own keys, where given."""
        named = {
            "duration": self.duration,
            "start_rps": self.start_rps,
            "end_rps": self.end_rps,
            "seed": self.seed,
            "max_concurrency": self.max_concurrency,
            "model": self.model,
        }
        return {k: v for k, v in named.items() if v is not None}

    def scenario_sets(self) -> list[tuple[str, str]]:
        """``--set KEY=VALUE`` as pairs; a malformed one is a one-line ``UserError``."""
        pairs = []
        for item in self.set:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. --set schedule.end_rps=30")
            pairs.append((key.strip(), value))
        return pairs

    def recorded_options(self) -> dict[str, Any]:
        """The options as the recording's header keeps them (before the run's own
        corrections and redaction): the command, then every flag under its dest, lists as
        lists, as `rampwatch run`'s parsed command line held them."""
        options: dict[str, Any] = {"command": "run" if self.search is None else "search"}
        for f in fields(self):
            if f.name == "search" and self.search is not None:
                options["search"] = self.search.options()
            elif f.name not in ("argv", "search"):
                value = getattr(self, f.name)
                options[f.name] = list(value) if isinstance(value, tuple) else value
        return options


def _frozen(value: Any) -> Any:
    """A repeatable flag's list as a tuple (a header pair stays a pair)."""
    return tuple(tuple(v) if isinstance(v, list) else v for v in value) if isinstance(value, list) else value
