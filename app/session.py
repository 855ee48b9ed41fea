"""A run's wiring, whichever way it is shown: scenario → runner → recorder, the embedded
simulator, the final summary, result JSON and exit code, and the headless path (progress
lines)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from rampwatch.core.bins import latest_complete, recent_mean
from rampwatch.core.errors import UserError
from rampwatch.core.redact import redact_text
from rampwatch.core.text import server_text
from rampwatch.loadgen import eventloop
from rampwatch.loadgen.client import ModelsAnswer, first_model_of, normalize_base_url, probe_models
from rampwatch.loadgen.connection import Connection, ca_context
from rampwatch.loadgen.runner import Run, RunOptions, RunResult
from rampwatch.loadgen.scenario import load_scenario
from rampwatch.loadgen.summary import dumps_bench_result, format_summary, summarise_requests, to_bench_result
from rampwatch.loadgen.tokenizers import load_tokenizer
from rampwatch.record.writer import RecordingWriter, default_recording_path
from rampwatch.sim.config import SimConfig
from rampwatch.sim.embedded import EmbeddedSim
from rampwatch.sim.gpu_telemetry import DCGM_PATH

# A run stopped before its schedule's end (Ctrl-C, the UI's stop or quit) or whose
# in-flight requests were cancelled exits with the shell's code for a SIGINT stop; the
# summary and files are still written.
INTERRUPTED_EXIT = 130


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    named = {
        "duration": args.duration,
        "start_rps": args.start_rps,
        "end_rps": args.end_rps,
        "seed": args.seed,
        "max_concurrency": args.max_concurrency,
        "model": args.model,
    }
    return {k: v for k, v in named.items() if v is not None}


def _parse_sets(values: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {item!r}: expected KEY=VALUE, e.g. --set schedule.end_rps=30")
        pairs.append((key.strip(), value))
    return pairs


def discover_model(target: str, connection: Connection) -> tuple[str, ModelsAnswer]:
    """The target's first model (``loadgen.client.first_model_of``) and the ``/v1/models``
    answer it came from (the run's start uses it rather than asking again), from
    synchronous code.

    On an event loop of its own in a worker thread: the caller may itself be running
    inside one (the live UI sets a run up from its loop), where a nested loop cannot run."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(
            lambda: eventloop.run(probe_models(target, timeout_s=10.0, connection=connection))
        ).result()
    return first_model_of(answer), answer


def _check_url(flag: str, url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise UserError(f"{flag} {redact_text(url)!r}: expected an http:// or https:// URL")
    try:
        urlsplit(url).port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise UserError(f"{flag} {redact_text(url)!r}: {exc}") from None
    return url.rstrip("/")


def is_local_host(url: str) -> bool:
    """The URL's host is this machine: a loopback name or address, or this host's name."""
    host = (urlsplit(url).hostname or "").lower()
    if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127."):
        return True
    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    return host in names


@dataclass(frozen=True)
class GpuTelemetryPlan:
    """Where a run reads GPU telemetry (``--gpu``, ``--gpu-metrics-url``), and why not when
    it reads none (an info event: the GPU panel is hidden, the run goes on)."""

    dcgm_urls: list[str]
    nvml: bool
    note: str | None
    simulated: bool  # the embedded simulator serves its DCGM page (--gpu sim)


def gpu_telemetry(mode: str, dcgm_urls: list[str], target: str | None) -> GpuTelemetryPlan:
    """``--gpu MODE`` with the checked ``--gpu-metrics-url``s against ``target`` (None: the
    embedded simulator, whose own page the run appends when ``simulated``)."""
    embedded = not target
    if mode == "sim" and not embedded:
        raise UserError(
            "--gpu sim: only with the embedded simulator (no --target); a `rampwatch sim --gpu-telemetry` "
            "elsewhere is read with --gpu-metrics-url URL/dcgm/metrics"
        )
    local = not embedded and is_local_host(target or "")
    # auto: NVML for a server on this host, unless a DCGM exporter was named (likely the
    # same GPUs: read twice, their power would be summed twice); --gpu nvml reads both.
    nvml = mode == "nvml" or (mode == "auto" and local and not dcgm_urls)
    note = None  # --gpu off asks for none: nothing to explain
    if not nvml and not dcgm_urls and mode == "auto":
        if embedded:
            note = "no GPU: the embedded simulator has none (--gpu sim simulates one): GPU panel hidden"
        else:
            note = "no GPU telemetry: the target is not on this host (--gpu-metrics-url reads its DCGM exporter): GPU panel hidden"
    return GpuTelemetryPlan(list(dcgm_urls), nvml, note, simulated=mode == "sim")


def check_outputs(recording: Path | None, result_json: Path | None, inputs: list[Path]) -> None:
    """Before anything runs: the run's outputs are distinct, none is one of its inputs,
    and each can be written (so that a long run does not end on an unwritable path)."""
    named = [("--record", recording), ("--result-json", result_json)]
    outputs = [(flag, path, path.resolve()) for flag, path in named if path is not None]
    if len(outputs) == 2 and outputs[0][2] == outputs[1][2]:
        raise UserError(f"--result-json {result_json}: is the recording (--record); give it another path")
    for flag, path, resolved in outputs:
        for source in inputs:
            if resolved == source.resolve():
                raise UserError(f"{flag} {path}: is an input of this run; give the output another path")
        if resolved.is_dir():
            raise UserError(f"{flag} {path}: is a directory")
        parent = next((p for p in resolved.parents if p.exists()), None)
        if parent is None or not parent.is_dir():
            raise UserError(f"{flag} {path}: a parent of it is not a directory")
        target = resolved if resolved.exists() else parent
        if not os.access(target, os.W_OK):
            raise UserError(f"{flag} {path}: not writable")


def result_json_path(explicit: str | None, recording: Path | None) -> Path | None:
    """``--result-json``, else beside the recording: ``X.json`` for ``X.rwrec``, and
    ``X.result.json`` when the recording is itself named ``X.json``."""
    if explicit:
        return Path(explicit)
    if recording is None:
        return None
    beside = recording.with_suffix(".json")
    return beside if beside != recording else recording.with_suffix(".result.json")


@dataclass
class PreparedRun:
    """Everything `rampwatch run` sets up before the load starts, in the process the user
    started: the run (built, not started), its recorder (opened by the run's first event,
    so only in the process that executes it) and the embedded simulator this process owns.

    ``execute()`` is the one way a run is executed, here (headless) or in the live UI's
    forked run process: it closes the recording there and reports its failure in the
    result's ``recording_error``."""

    run: Run
    args: argparse.Namespace
    embedded: EmbeddedSim | None = None
    recorder: RecordingWriter | None = None
    recording_path: Path | None = None
    result_json_path: Path | None = None

    async def execute(self) -> RunResult:
        try:
            result = await self.run.execute()
        except BaseException:
            self._close_recording()
            raise
        result.recording_error = self._close_recording()
        return result

    def _close_recording(self) -> str | None:
        if self.recorder is None:
            return None
        self.recorder.close()
        return None if self.recorder.error is None else str(self.recorder.error)

    def close(self) -> None:
        """Stop the embedded simulator (the recording is closed by ``execute``)."""
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None


def prepare_run(args: argparse.Namespace) -> PreparedRun:
    scenario = load_scenario(args.scenario, overrides=_parse_sets(args.set), flags=_overrides(args))
    api_key = args.api_key or os.environ.get("OPENAI_API_KEY") or None
    headers = list(getattr(args, "header", None) or [])
    insecure, ca_cert = bool(getattr(args, "insecure", False)), getattr(args, "ca_cert", None)
    connection = Connection(api_key=api_key, headers=tuple(headers), insecure=insecure, ca_cert=ca_cert)
    if ca_cert:
        ca_context(ca_cert)  # a missing or bad file: one line now, not after the set-up
    metrics_urls = [_check_url("--metrics-url", u) for u in args.metrics_url]
    gpu_urls = [_check_url("--gpu-metrics-url", u) for u in getattr(args, "gpu_metrics_url", None) or []]
    gpu_plan = gpu_telemetry(getattr(args, "gpu", "auto"), gpu_urls, args.target)
    recording_path = None
    if not args.no_record:
        recording_path = Path(args.record) if args.record else default_recording_path(scenario.name, time.time())
    result_json = result_json_path(args.result_json, recording_path)
    check_outputs(recording_path, result_json, [Path(scenario.path)] if scenario.path else [])
    tokenizer = load_tokenizer(args.tokenizer)

    embedded = None
    if args.target:
        # A base URL with or without /v1: requests go to BASE/v1/..., metrics to BASE/metrics.
        target = normalize_base_url(_check_url("--target", args.target))
    else:
        embedded = EmbeddedSim(
            SimConfig(
                hardware=args.sim_hardware, model=args.sim_model, seed=scenario.seed, gpu_telemetry=gpu_plan.simulated
            )
        )
        embedded.start()
        target = embedded.url
        if gpu_plan.simulated:
            gpu_plan.dcgm_urls.append(target + DCGM_PATH)
    try:
        model, models_answer = args.model or scenario.model, None
        if not model:
            model, models_answer = discover_model(target, connection)
        cli_options = {k: v for k, v in vars(args).items() if k not in ("func",)}
        cli_options["target"] = target
        cli_options["header"] = connection.header_names()  # header values are secrets
        options = RunOptions(
            target=target,
            model=model,
            api_key=api_key,
            headers=headers,
            insecure=insecure,
            ca_cert=ca_cert,
            models_answer=models_answer,
            metrics_urls=metrics_urls or [target + "/metrics"],
            scrape_interval_s=args.scrape_interval,
            metrics_max_bytes=args.metrics_max_bytes,
            request_timeout_s=args.request_timeout,
            stop_grace_s=args.stop_grace,
            rate_step_rps=args.rate_step,
            tokenizer=tokenizer,
            cli_options=cli_options,
            gpu_price_per_hour=args.gpu_price_per_hour,
            save_generated_texts=args.save_generated_texts,
            gpu_metrics_urls=gpu_plan.dcgm_urls,
            gpu_nvml=gpu_plan.nvml,
            gpu_note=gpu_plan.note,
        )
        recorder = None
        if recording_path is not None:
            recorder = RecordingWriter(recording_path, secrets=connection.secrets() or None)
        run = Run(scenario, options, sinks=[recorder] if recorder is not None else [])
        return PreparedRun(
            run=run,
            args=args,
            embedded=embedded,
            recorder=recorder,
            recording_path=recording_path,
            result_json_path=result_json,
        )
    except BaseException:
        if embedded is not None:
            embedded.stop()
        raise


def finish_run(prepared: PreparedRun, result: RunResult, out: TextIO = sys.stdout) -> int:
    """Summary, result JSON, exit code. Shared by the headless and the TUI paths."""
    args = prepared.args
    # Over the run's window (first send to last completion, as vLLM and `rampwatch report`
    # measure it), not the whole run: the wait for the server and the drain are not load.
    summary = summarise_requests(
        result.header,
        result.requests,
        result.samples,
        result.events,
        slo=prepared.run.scenario.slo,
        gpu_price_per_hour=args.gpu_price_per_hour,
        idle_duration_s=result.duration_s,
    )
    print(format_summary(summary), file=out)
    code = 0
    if prepared.result_json_path is not None:
        try:
            prepared.result_json_path.parent.mkdir(parents=True, exist_ok=True)
            prepared.result_json_path.write_bytes(
                dumps_bench_result(
                    to_bench_result(
                        summary,
                        result.header,
                        result.requests,
                        detailed=args.save_detailed or args.save_generated_texts,
                    )
                )
            )
            print(f"result JSON: {prepared.result_json_path}", file=out)
        except OSError as exc:  # e.g. the disk filled up during the run: the summary above stands
            print(f"rampwatch run: cannot write {prepared.result_json_path}: {exc.strerror or exc}", file=sys.stderr)
            code = 1
    if prepared.recording_path is not None:
        print(f"recording: {prepared.recording_path}", file=out)
    if result.recording_error is not None:
        print(f"rampwatch run: recording {prepared.recording_path} failed: {result.recording_error}", file=sys.stderr)
        code = 1
    if not result.requests:
        print("rampwatch run: no request was sent", file=sys.stderr)
        return 1
    if result.interrupted:
        print(
            f"rampwatch run: stopped before the end (exit {INTERRUPTED_EXIT}): the summary covers "
            f"{summary.completed:,} completed, {summary.failed:,} failed and {summary.cancelled:,} cancelled requests",
            file=sys.stderr,
        )
        return INTERRUPTED_EXIT
    if result.error_rate > args.max_error_rate:
        print(
            f"rampwatch run: error rate {result.error_rate:.1%} exceeds --max-error-rate {args.max_error_rate:.1%}",
            file=sys.stderr,
        )
        return 1
    return code


class ProgressPrinter:
    """Headless progress: one line every few seconds, from the live series."""

    def __init__(self, snapshot: Callable[[], Any], interval_s: float, out: TextIO = sys.stdout) -> None:
        self.snapshot = snapshot
        self.out = out
        self.interval_s = interval_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            print(progress_line(self.snapshot(), self.interval_s), file=self.out, flush=True)


# Per-second counts: shown as their mean over the progress interval.
_RATE_SERIES = ("sent_rps", "completed_rps", "error_rps", "client_output_tps")


def progress_line(snap: Any, window_s: float = 1.0) -> str:
    """One headless progress line. Rates are means over the last ``window_s`` complete
    seconds; latencies and server gauges are the latest complete second."""
    s = snap.series
    window = max(1, int(round(window_s)))

    def fmt(name: str, scale: float = 1.0, digits: int = 1) -> str:
        values = s.get(name, [])
        complete = len(values) - 1 if len(values) > 1 else len(values)  # the newest second is still filling
        if name in _RATE_SERIES:
            v = recent_mean(values, complete, window)
        else:  # a gauge shows "-" rather than a value older than two seconds
            v = latest_complete(values, complete, look_back=2)
        return "-" if v is None else f"{v * scale:.{digits}f}"

    queued = fmt("client_queued", digits=0)
    # Requests waiting for a --max-concurrency slot: the client's queue, not the server's.
    client_queue = f" | client queue {queued}" if queued not in ("-", "0") else ""
    line = (
        f"[{snap.t:6.0f}s] {snap.state:<8} target {snap.target_rps:5.1f} rps | "
        f"sent {fmt('sent_rps')} done {fmt('completed_rps')} err {fmt('error_rps')} | "
        f"in-flight {snap.in_flight}{client_queue} | out {fmt('client_output_tps', digits=0)} tok/s | "
        f"TTFT p50 {fmt('ttft_p50', 1000, 0)} ms p99 {fmt('ttft_p99', 1000, 0)} ms"
    )
    if snap.server_metrics_available:
        line += (
            f" | server run {fmt('running', digits=0)} wait {fmt('waiting', digits=0)} "
            f"KV {fmt('kv_usage_pct')}% hit {fmt('prefix_hit_pct')}%"
        )
    if getattr(snap, "last_good_gpu_t", None) is not None:
        line += f" | GPU {fmt('gpu_util_pct', digits=0)}% {fmt('gpu_power_w', digits=0)} W"
    return line


async def _run_headless(prepared: PreparedRun) -> RunResult:
    run = prepared.run
    loop = asyncio.get_running_loop()
    interrupts = 0

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            print(
                "\nstopping: no new requests; in-flight ones get the grace period (Ctrl-C again to cancel them)",
                file=sys.stderr,
                flush=True,
            )
            run.interrupt()
        else:
            run.options.stop_grace_s = 0.0
            run.cancel_in_flight()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_sigint)
    interval = prepared.args.progress_interval
    progress = asyncio.create_task(ProgressPrinter(run.snapshot, interval_s=interval).run())
    try:
        return await prepared.execute()
    finally:
        progress.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_headless(args: argparse.Namespace) -> int:
    """`rampwatch run --headless`: progress lines, then the summary."""
    prepared = prepare_run(args)
    try:
        options = prepared.run.options
        banner = (
            f"rampwatch run: {prepared.run.scenario.name} against {options.target} (model {options.model}); "
            f"server metrics from {', '.join(options.metrics_urls)}"
        )
        gpu_sources = (["NVML"] if options.gpu_nvml else []) + [redact_text(u) for u in options.gpu_metrics_urls]
        if gpu_sources:
            banner += f"; GPU telemetry from {', '.join(gpu_sources)}"
        print(server_text(banner), flush=True)
        if prepared.recording_path is not None:
            print(f"recording to {prepared.recording_path}", flush=True)
        result = eventloop.run(_run_headless(prepared))
    finally:
        prepared.close()
    return finish_run(prepared, result)
