"""`rampwatch run`: its flags, and the choice between the live UI (on a terminal) and the
headless path. The wiring itself is in ``rampwatch.app.session``, imported only once a run
is asked for, so that building the CLI parser stays cheap."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from rampwatch.app import credentials
from rampwatch.loadgen.server.managed import DEFAULT_STARTUP_TIMEOUT_S

DEFAULT_PROGRESS_INTERVAL_S = 5.0
DEFAULT_METRICS_MAX_BYTES = (
    8 * 1024 * 1024
)  # loadgen.server.scrape.DEFAULT_MAX_BODY_BYTES (not imported: keeps the parser cheap)
DEFAULT_SIM_HARDWARE = "l4"
DEFAULT_SIM_MODEL = "llama-3.1-8b-fp8"
GPU_MODES = ("auto", "nvml", "sim", "off")  # --gpu (app.session.gpu_telemetry)


def _number(kind: type, test, wanted: str):
    """An argparse type: a number of ``kind`` that passes ``test``, else a one-line error
    saying what was wanted (argparse names the flag)."""

    def parse(text: str):
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


def drain_policy(text: str):
    """An argparse type for ``--drain``: wait, cap:SECONDS or cancel."""
    from rampwatch.loadgen.run.drain import parse_drain

    try:
        return parse_drain(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def configure(parser: argparse.ArgumentParser) -> None:
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
        "--tokenizer", metavar="NAME_OR_PATH", help="HF tokenizer for exact prompt lengths (default: the simulator's)"
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
        default=DEFAULT_SIM_MODEL,
        metavar="PRESET",
        help=f"embedded simulator model preset (default {DEFAULT_SIM_MODEL})",
    )
    from rampwatch.app.ray_run import add_ray_flags

    add_ray_flags(parser, positive_float)


def want_tui(args: argparse.Namespace, stdout: TextIO | None = None) -> bool:
    stdout = stdout if stdout is not None else sys.stdout
    if args.headless:
        return False
    try:
        return bool(stdout.isatty())
    except (AttributeError, ValueError):
        return False


def main(args: argparse.Namespace) -> int:
    from rampwatch.app.ray_run import check_ray_flags

    check_ray_flags(args)
    for warning in credentials.resolve(args):
        print(f"rampwatch run: warning: {warning}", file=sys.stderr)
    credentials.hide_in_process_table(credentials.typed_secrets(args))
    if args.detach:
        from rampwatch.app.detach import launch

        return launch(args)
    from rampwatch.app import runs

    if not args.run_id:
        args.run_id = runs.new_run_id()
    code = 1
    try:
        if want_tui(args):
            from rampwatch.app.live import run_live

            code = run_live(args)
        else:
            from rampwatch.app.session import run_headless

            code = run_headless(args)
        return code
    except KeyboardInterrupt:
        code = 130
        raise
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        raise
    except Exception as exc:
        code = getattr(exc, "exit_code", 1)
        raise
    finally:
        from rampwatch.core.files import release_all

        release_all()  # the run's outputs, whichever way it ended (finish_run let them go already)
        runs.finished(args.run_id, code)  # for `rampwatch ps` and `rampwatch stop`
