"""`rampwatch run --headless`: progress lines every few seconds, the run's server
watched, then the summary."""

from __future__ import annotations

import asyncio
import math
import signal
import sys
from collections.abc import Callable
from typing import Any, TextIO

from rampwatch.app import runs
from rampwatch.app.control import serve_run
from rampwatch.app.run_config import RunConfig
from rampwatch.app.session.build import PreparedRun, attach_hello, prepare_run, run_progress
from rampwatch.app.session.finish import finish_run
from rampwatch.app.session.plan import RunPlan
from rampwatch.core.bins import latest_complete, recent_max, recent_mean
from rampwatch.core.cache_salt import describe_cache_policy
from rampwatch.core.figures.client_lag import LIVE_LAG_BOUND_MS
from rampwatch.core.files import silence_stdout, stdout_reader_gone
from rampwatch.core.redact import redact_text
from rampwatch.core.text import printable, server_text
from rampwatch.core.timeline import Event, NullSink
from rampwatch.loadgen.run import eventloop
from rampwatch.loadgen.run.result import RunResult
from rampwatch.loadgen.workload.sessions import session_target, users_for, users_target

# Between checks of whether the run's server is still there.
SERVER_WATCH_INTERVAL_S = 0.5


class ProgressPrinter:
    """Headless progress: one line every few seconds, from the live series."""

    def __init__(self, snapshot: Callable[[], Any], interval_s: float, out: TextIO = sys.stdout) -> None:
        self.snapshot = snapshot
        self.out = out
        self.interval_s = interval_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                print(progress_line(self.snapshot(), self.interval_s), file=self.out, flush=True)
            except BrokenPipeError:  # `| head` has left: the run goes on, its output to /dev/null
                if not stdout_reader_gone():
                    raise
                silence_stdout()


class SearchLines(NullSink):
    """`rampwatch search` headless: each step of the search (a window judged, the bracket,
    a drain, a hold and its verdict) as a line when it happens, between the progress lines."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self.out = out

    def on_event(self, event: Event) -> None:
        if event.kind != "search" or (event.data or {}).get("search") == "result":  # the summary gives the result
            return
        try:
            print(f"[{event.t:6.0f}s] search: {printable(event.message)}", file=self.out, flush=True)
        except BrokenPipeError:
            if not stdout_reader_gone():
                raise
            silence_stdout()


# Bins a progress line reads beyond its interval: the filling second and a gauge's look-back.
PROGRESS_SPARE_BINS = 4
# Per-second counts: shown as their mean over the progress interval.
_RATE_SERIES = ("sent_rps", "completed_rps", "error_rps", "client_output_tps")


def progress_line(snap: Any, window_s: float = 1.0) -> str:
    """One headless progress line. Rates are means over the last ``window_s`` complete
    seconds; latencies and server gauges are the latest complete second."""
    reasoning = getattr(snap, "reasoning", None)  # a reasoning run's TTFA series
    s = snap.series if reasoning is None else {**snap.series, **reasoning}
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
    # A session workload's conversations under way (think time included): its load is
    # these, not the request rate alone.
    active = fmt("sessions_active", digits=0)
    has_sessions = session_target(snap.header) or users_target(snap.header)
    sessions = f" | sessions {active} active" if has_sessions and active != "-" else ""
    # A closed loop's target is a number of users (schedule kind users).
    if users_target(snap.header):
        target = f"{users_for(snap.target_rps):3d} users"
    elif session_target(snap.header):  # an open-loop session workload: sessions started
        target = f"{snap.target_rps:5.1f} sessions/s"
    else:
        target = f"{snap.target_rps:5.1f} rps"
    line = (
        f"[{snap.t:6.0f}s] {snap.state:<8} target {target} | "
        f"sent {fmt('sent_rps')} done {fmt('completed_rps')} err {fmt('error_rps')} | "
        f"in-flight {snap.in_flight}{client_queue}{sessions} | out {fmt('client_output_tps', digits=0)} tok/s | "
        f"TTFT p50 {fmt('ttft_p50', 1000, 0)} ms p99 {fmt('ttft_p99', 1000, 0)} ms"
    )
    if reasoning is not None:
        line += f" | TTFA p50 {fmt('ttfa_p50', 1000, 0)} ms p99 {fmt('ttfa_p99', 1000, 0)} ms"
    if snap.server_metrics_available:
        line += (
            f" | server run {fmt('running', digits=0)} wait {fmt('waiting', digits=0)} "
            f"KV {fmt('kv_usage_pct')}% hit {fmt('prefix_hit_pct')}%"
        )
    if getattr(snap, "last_good_gpu_t", None) is not None:
        line += f" | GPU {fmt('gpu_util_pct', digits=0)}% {fmt('gpu_power_w', digits=0)} W"
    lags = s.get("client_lag_ms", [])
    lag = recent_max(lags, len(lags) - 1, window)  # the newest second is still filling
    if lag is not None and lag > LIVE_LAG_BOUND_MS:  # the client's own delay, once it could show
        line += f" | client lag {lag:.0f} ms"
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

    # SIGTERM and SIGHUP (the SSH session closed) stop the run as Ctrl-C does: the load
    # drains, then the server is stopped and the summary written.
    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for sig in stop_signals:
        loop.add_signal_handler(sig, on_sigint)
    interval = prepared.config.progress_interval
    # A progress line reads the newest seconds only: the last bins, not a long run's day of them.
    last_bins = math.ceil(interval) + PROGRESS_SPARE_BINS
    progress = ProgressPrinter(lambda: run.snapshot(last_bins), interval_s=interval)
    if run.search is not None:
        run.sink.sinks.append(SearchLines())
    background = [asyncio.create_task(progress.run())]
    if prepared.server is not None:
        background.append(asyncio.create_task(watch_server(prepared)))
    try:
        return await serve_run(
            prepared.config.run_id,
            prepared.execute,
            run.snapshot,
            run,
            hello=attach_hello(prepared),
            progress=lambda: run_progress(run),
        )()
    finally:
        for task in background:
            task.cancel()
        for sig in stop_signals:
            loop.remove_signal_handler(sig)


async def watch_server(prepared: PreparedRun) -> None:
    """Until the run ends: a server that exits on its own fails the run at once."""
    # Polled: a thread blocked in the guard's wait() would outlive the loop (the server is
    # stopped only after the loop has ended).
    while prepared.check_server() is None:  # noqa: ASYNC110
        await asyncio.sleep(SERVER_WATCH_INTERVAL_S)
    exited = prepared.server_exit
    print(f"\nrampwatch run: {exited}; stopping the run", file=sys.stderr, flush=True)


def run_headless(config: RunConfig) -> int:
    """`rampwatch run --headless`: progress lines, then the summary."""
    run_id, detached = config.run_id, config.detached_log

    def register(plan: RunPlan) -> None:
        if run_id is not None:
            runs.register(run_id, plan, detached=detached is not None, log=detached)

    prepared = prepare_run(config, on_plan=register)
    try:
        options = prepared.run.options
        banner = (
            f"rampwatch run: {prepared.run.scenario.name} against {options.target} (model {options.model}); "
            f"server metrics from {', '.join(options.metrics_urls)}"
        )
        gpu_sources = (["NVML"] if options.gpu_nvml else []) + [redact_text(u) for u in options.gpu_metrics_urls]
        if gpu_sources:
            banner += f"; GPU telemetry from {', '.join(gpu_sources)}"
        banner += f"; seed {prepared.run.scenario.seed}, {describe_cache_policy(options.cache_salt_policy, options.cache_salt)}"
        # the model id is the server's text: it may echo a header value or the key
        secrets = prepared.run.connection.secrets()
        print(server_text(banner, secrets), flush=True)
        print(f"{options.drain.describe()} (--drain)", flush=True)
        if prepared.recording_path is not None:
            print(f"recording to {prepared.recording_path}", flush=True)
        if prepared.server is not None and prepared.server.log_path is not None:
            print(f"server log to {prepared.server.log_path}", flush=True)
        if run_id is not None and not detached:
            print(f"run {run_id}: rampwatch attach {run_id} watches it from another terminal", flush=True)
        result = eventloop.run(_run_headless(prepared))
    finally:
        prepared.close()
    return finish_run(prepared, result)
