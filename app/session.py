"""A run's wiring, whichever way it is shown: scenario → runner → recorder, the server the
run starts (``--serve``, or the embedded simulator, which is ``--serve "rampwatch sim …"``),
the final summary, result JSON and exit code, and the headless path (progress lines)."""

from __future__ import annotations

import asyncio
import atexit
import math
import os
import shlex
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from rampwatch.app import runs
from rampwatch.app.control import serve_run
from rampwatch.app.ray_run import ray_workers
from rampwatch.app.run_config import RunConfig
from rampwatch.core.bins import latest_complete, recent_max, recent_mean
from rampwatch.core.cache_salt import cache_salt_choice, describe_cache_policy
from rampwatch.core.errors import ServerExited, UserError
from rampwatch.core.figures.classes import CLASS_NOTE, class_summaries, class_table, per_class_results
from rampwatch.core.figures.client_lag import LIVE_LAG_BOUND_MS
from rampwatch.core.figures.knee_explain import ServerLimits
from rampwatch.core.figures.summary import (
    Summary,
    dumps_bench_result,
    format_summary,
    summarise_requests,
    to_bench_result,
)
from rampwatch.core.figures.turns import TURNS_NOTE, TurnTable, turn_sections, turn_table
from rampwatch.core.files import (
    OutputClaim,
    check_replaceable,
    claim_outputs,
    is_special,
    private_file,
    silence_stdout,
    stdout_reader_gone,
)
from rampwatch.core.redact import redact_options, redact_text
from rampwatch.core.text import fill_to, fit_lines, server_text, terminal_width
from rampwatch.core.timeline import Event, RunHeader
from rampwatch.core.version import rampwatch_version
from rampwatch.loadgen.run import eventloop
from rampwatch.loadgen.run.drain import DrainPolicy
from rampwatch.loadgen.run.loop_health import check_gc_policy
from rampwatch.loadgen.run.runner import Run, RunOptions, RunResult, host_info
from rampwatch.loadgen.run.worker_pool import LocalWorkers
from rampwatch.loadgen.run.workers import SenderFactory
from rampwatch.loadgen.server.gpu import NvmlReader, NvmlUnavailable
from rampwatch.loadgen.server.managed import (
    PHASE_STARTING,
    ManagedServer,
    ServeCommand,
    server_log_path,
)
from rampwatch.loadgen.transport.client import ModelsAnswer, first_model_of, normalize_base_url, probe_models
from rampwatch.loadgen.transport.connection import Connection, ca_context
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.sessions import session_target, users_for, users_target
from rampwatch.loadgen.workload.tokenizers import load_tokenizer
from rampwatch.record.analysis import class_figures, recording_turns, summarise
from rampwatch.record.cli_export import write_bench_result
from rampwatch.record.reader import Recording, open_recording
from rampwatch.record.writer import RecordingWriter, default_recording_path
from rampwatch.sim.cli import config_to_argv
from rampwatch.sim.config import SimConfig
from rampwatch.sim.gpu_telemetry import DCGM_PATH

# A run stopped before its schedule's end (Ctrl-C, the UI's stop or quit) or whose
# in-flight requests were cancelled exits with the shell's code for a SIGINT stop; the
# summary and files are still written.
INTERRUPTED_EXIT = 130
# The server the run started (--serve, or the embedded simulator) exited on its own.
SERVER_EXITED_EXIT = ServerExited.exit_code
# Between checks of whether the run's server is still there.
SERVER_WATCH_INTERVAL_S = 0.5
# Headless, between the lines that say a server is still starting.
SERVER_PROGRESS_INTERVAL_S = 30.0


def discover_model(target: str, connection: Connection, key_from: str | None = None) -> tuple[str, ModelsAnswer]:
    """The target's first model (``loadgen.transport.client.first_model_of``) and the ``/v1/models``
    answer it came from (the run's start uses it rather than asking again), from
    synchronous code.

    On an event loop of its own in a worker thread: the caller may itself be running
    inside one (the live UI sets a run up from its loop), where a nested loop cannot run."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        answer = pool.submit(
            lambda: eventloop.run(probe_models(target, timeout_s=10.0, connection=connection))
        ).result()
    return first_model_of(answer, key_from if connection.api_key else None), answer


def _check_url(flag: str, url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise UserError(f"{flag} {redact_text(url)!r}: expected an http:// or https:// URL")
    try:
        urlsplit(url).port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise UserError(f"{flag} {redact_text(url)!r}: {exc}") from None
    return url.rstrip("/")


def _check_one_authorization(target: str, config: RunConfig, connection: Connection) -> None:
    """A ``user:password`` in ``--target`` is HTTP basic auth; an API key (or an
    ``Authorization`` header) is another: aiohttp refuses a request with both, so the run
    is refused before it starts, in one line that does not show the password."""
    parts = urlsplit(target)
    if parts.username is None and parts.password is None:
        return
    if any(name.lower() == "authorization" for name, _ in connection.headers):
        other = "--header Authorization"
    elif config.api_key:
        other = "--api-key"
    elif connection.api_key:
        other = "OPENAI_API_KEY (from the environment)"
    else:
        return
    raise UserError(f"{other} and a user:password in --target: give one of them")


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


def nvml_missing() -> str | None:
    """Why NVML cannot be read on this host (no library, no driver, no GPU); None when it can."""
    try:
        NvmlReader.open().close()
    except NvmlUnavailable as exc:
        return str(exc)
    return None


def gpu_telemetry(
    mode: str, dcgm_urls: list[str], target: str | None, nvml_check: Callable[[], str | None] = nvml_missing
) -> GpuTelemetryPlan:
    """``--gpu MODE`` with the checked ``--gpu-metrics-url``s against ``target`` (None: the
    embedded simulator, whose own page the run appends when ``simulated``). ``auto`` reads
    NVML only where ``nvml_check`` finds it (so the run never claims a source it lacks)."""
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
    missing = nvml_check() if nvml and mode == "auto" else None
    if missing is not None:
        nvml, note = False, f"{missing}: GPU panel hidden"
    elif not nvml and not dcgm_urls and mode == "auto":
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


def recording_file(given: str) -> Path | None:
    """``--record PATH`` as the file the run records to: None (as --no-record, the run's
    figures from a scratch recording) for ``/dev/null``, which cannot be read back; a
    terminal, a pipe or this run's own standard output is one line (a binary recording
    on the screen, or mixed with the summary in one file)."""
    path = Path(given)
    try:
        info = path.stat()
    except OSError:
        return path  # a new file (or one the claim will say is not writable)
    if stat.S_ISCHR(info.st_mode) and os.path.samefile(path, os.devnull):
        return None
    own = set()
    for fd in (1, 2):
        try:
            out = os.fstat(fd)
            own.add((out.st_dev, out.st_ino))
        except OSError:
            pass
    if (info.st_dev, info.st_ino) in own:
        raise UserError(f"--record {path}: is this run's own output (the summary goes there); give a file")
    if stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode) or (stat.S_ISCHR(info.st_mode) and _is_tty(path)):
        raise UserError(
            f"--record {path}: a terminal or a pipe (a recording is binary, read back after the run); give a file"
        )
    return path


def _is_tty(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def result_json_path(explicit: str | None, recording: Path | None) -> Path | None:
    """``--result-json``, else beside the recording: ``X.json`` for ``X.rwrec``, and
    ``X.result.json`` when the recording is itself named ``X.json``."""
    if explicit:
        return Path(explicit)
    if recording is None or is_special(recording):  # nothing is "beside" a device: /dev/full.json
        return None
    beside = recording.with_suffix(".json")
    return beside if beside != recording else recording.with_suffix(".result.json")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the embedded simulator's)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def sim_serve_text(config: SimConfig, host: str = "127.0.0.1", port: int | None = None) -> str:
    """The ``--serve`` command of the embedded simulator for ``config``: `rampwatch run`
    without ``--target`` and ``--serve`` is exactly a run with this ``--serve``."""
    config.resolved()  # a bad preset is one line here, before anything starts
    port = free_port(host) if port is None else port
    # Per-request prefix-cache hits (usage.prompt_tokens_details) feed the hit rate by
    # turn; vLLM needs the flag for them, the simulator rampwatch starts always has it.
    config = replace(config, enable_prompt_tokens_details=True)
    return shlex.join(["rampwatch", "sim", *config_to_argv(config), "--host", host, "--port", str(port)])


@contextmanager
def serving_sim(config: SimConfig, host: str = "127.0.0.1", timeout_s: float = 30.0) -> Iterator[ManagedServer]:
    """The simulator for ``config``, started as `rampwatch run` starts it, until the block
    ends (tests and benchmarks run their loads against ``.url``)."""
    with ManagedServer(ServeCommand.parse(sim_serve_text(config, host))) as server:
        server.start(timeout_s)
        yield server


def serve_command(config: RunConfig, seed: int | None = None, gpu_telemetry: bool = False) -> ServeCommand | None:
    """What `rampwatch run` starts: ``--serve``, else (no ``--target``) the embedded
    simulator (serving its DCGM page with ``gpu_telemetry``); None when it only connects
    to ``--target``."""
    target = normalize_base_url(_check_url("--target", config.target)) if config.target else None
    if config.serve is not None:
        return ServeCommand.parse(config.serve, target=target)
    if target is not None:
        return None
    config = SimConfig(
        hardware=config.sim_hardware,
        model=config.sim_model,
        seed=seed if seed is not None else 0,
        gpu_telemetry=gpu_telemetry,
    )
    try:
        return ServeCommand.parse(sim_serve_text(config))
    except UserError as exc:  # the simulator's own flags are `rampwatch run`'s --sim-*
        raise UserError(str(exc).replace("--hardware", "--sim-hardware").replace("--model", "--sim-model")) from None


def start_server(
    server: ManagedServer,
    timeout_s: float,
    out: TextIO = sys.stdout,
    progress_interval_s: float = SERVER_PROGRESS_INTERVAL_S,
) -> float:
    """``server.start`` with progress lines (headless): its pid, then every
    ``progress_interval_s`` the time so far and its last log line (a model can take
    minutes to load), then the startup time. SIGTERM and SIGHUP during the start
    interrupt it like Ctrl-C: the server is stopped, the run exits 130."""
    started = time.monotonic()
    done = threading.Event()

    def report_progress() -> None:
        while not done.wait(progress_interval_s):
            tail = server.tail
            last = f"; last log line: {tail[-1]}" if tail else "; no output yet"
            print(f"server: still starting ({time.monotonic() - started:.0f} s){last}", file=out, flush=True)

    def on_phase(phase: str) -> None:
        if phase == PHASE_STARTING:
            print(f"server: starting (pid {server.pid}) …", file=out, flush=True)
            threading.Thread(target=report_progress, name="server-start-progress", daemon=True).start()

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = {}
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        startup = server.start(timeout_s, on_phase=on_phase)
    except ServerExited as exc:
        done.set()
        print_server_tail(exc.tail)
        raise
    finally:
        done.set()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"server: ready in {startup:.1f} s", file=out, flush=True)
    return startup


SERVER_TAIL_SHOWN = 10


def print_server_tail(tail: list[str], err: TextIO | None = None) -> None:
    """The last lines of a server's log, before the one line that says it exited."""
    err = err if err is not None else sys.stderr
    lines = tail[-SERVER_TAIL_SHOWN:]
    if lines:
        print(f"server log (last {len(lines)} lines):", file=err)
        for line in lines:
            print(f"  {line}", file=err)
    err.flush()


@dataclass
class RunPlan:
    """A run's inputs, checked, before anything starts: a long server start never ends on
    a bad flag."""

    config: RunConfig
    scenario: Any
    connection: Connection
    metrics_urls: list[str]
    recording_path: Path | None
    result_json_path: Path | None
    tokenizer: Any
    server: ManagedServer | None  # not started yet
    target: str
    gpu: GpuTelemetryPlan
    # --cache-salt: the policy (core.cache_salt) and the salt every request carries.
    cache_policy: tuple[str, str | None]
    # The recording, result JSON and server log, held by this run (``core.files``) until
    # ``finish_run`` has written them; None when the plan only checks (``--detach``).
    outputs: OutputClaim | None = None


def unused_default_path(path: Path) -> Path:
    """The default recording's path, or ``…-2.rwrec``, ``…-3.rwrec`` when a run of the
    same scenario started in the same second has it (or its result JSON or server log)."""
    candidate, n = path, 1
    while any(p.exists() for p in (candidate, result_json_path(None, candidate), server_log_path(candidate))):
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def plan_run(config: RunConfig, claim: bool = True) -> RunPlan:
    """The run's inputs checked and its outputs claimed (``claim``; else only checked:
    ``--detach`` checks, the process it starts claims)."""
    check_gc_policy()  # RAMPWATCH_LOAD_GC: a value it does not know stops the run here
    scenario = load_scenario(config.scenario, overrides=config.scenario_sets(), flags=config.scenario_flags())
    connection = Connection(
        api_key=config.api_key_or_env, headers=config.header, insecure=config.insecure, ca_cert=config.ca_cert
    )
    if config.ca_cert:
        ca_context(config.ca_cert)  # a missing or bad file: one line now, not after the set-up
    metrics_urls = [_check_url("--metrics-url", u) for u in config.metrics_url]
    recording_path = None
    if not config.no_record:
        recording_path = (
            recording_file(config.record)
            if config.record
            else unused_default_path(default_recording_path(scenario.name, time.time()))
        )
    result_json = result_json_path(config.result_json, recording_path)
    check_outputs(recording_path, result_json, [Path(scenario.path)] if scenario.path else [])
    cache_policy = cache_salt_choice(config.cache_salt)
    tokenizer = load_tokenizer(config.tokenizer)
    gpu_urls = [_check_url("--gpu-metrics-url", u) for u in config.gpu_metrics_url]
    # The embedded simulator: no target yet (GPU telemetry is simulated or absent).
    gpu_plan = gpu_telemetry(config.gpu, gpu_urls, None) if config.embedded_sim else None
    command = serve_command(config, seed=scenario.seed, gpu_telemetry=gpu_plan is not None and gpu_plan.simulated)
    server = None
    if command is None:
        # A base URL with or without /v1: requests go to BASE/v1/..., metrics to BASE/metrics.
        target = normalize_base_url(_check_url("--target", config.target or ""))
        _check_one_authorization(target, config, connection)
    else:
        target = command.base_url
    if gpu_plan is None:  # a server of the user's (started here or not): where it runs decides
        gpu_plan = gpu_telemetry(config.gpu, gpu_urls, target)
    if gpu_plan.simulated:
        gpu_plan.dcgm_urls.append(target + DCGM_PATH)
    if command is not None:
        log_path = Path(config.server_log) if config.server_log else None
        if log_path is None and recording_path is not None:
            log_path = server_log_path(recording_path)
        # --force replaces an earlier run's log, as it does the recording
        server = ManagedServer(command, log_path=log_path, connection=connection, replace_log=config.force)
    named = [("--record", recording_path), ("--result-json", result_json)]
    if server is not None:
        named.append(("--server-log", server.log_path))
    named_outputs = [(flag, path) for flag, path in named if path is not None]
    outputs = None
    if claim:  # last: nothing after it can fail and leave the outputs held
        outputs = claim_outputs(named_outputs, config.force)
    else:
        for flag, path in named_outputs:
            check_replaceable(flag, path, config.force)
    return RunPlan(
        config=config,
        scenario=scenario,
        connection=connection,
        metrics_urls=metrics_urls,
        recording_path=recording_path,
        result_json_path=result_json,
        tokenizer=tokenizer,
        server=server,
        target=target,
        gpu=gpu_plan,
        cache_policy=cache_policy,
        outputs=outputs,
    )


@dataclass
class FinalFigures:
    """What the end of a run prints and writes (``final_figures``)."""

    summary: Summary
    turns: TurnTable | None
    classes: dict[str, Summary]
    recording: Recording | None = None  # read back: the result JSON streams from it
    note: str | None = None  # why the figures are not the exact ones
    unreadable: str | None = None  # the recording was written but could not be read back


@dataclass
class PreparedRun:
    """Everything `rampwatch run` sets up before the load starts, in the process the user
    started: the run (built, not started), its recorder (opened by the run's first event,
    so only in the process that executes it) and the server this process started.

    ``execute()`` is the one way a run is executed, here (headless) or in the live UI's
    forked run process: it closes the recording there and reports its failure in the
    result's ``recording_error``."""

    run: Run
    config: RunConfig
    server: ManagedServer | None = None
    recorder: RecordingWriter | None = None
    recording_path: Path | None = None
    result_json_path: Path | None = None
    server_exit: ServerExited | None = None  # the server exited on its own during the run
    # The server restarted from the live screen (`R`, ``app.restart``) did not start.
    restart_error: UserError | None = None
    # --no-record: the run's records still go to a recording, this one, in a temporary
    # directory removed once the final figures are computed (``finish_run``).
    scratch_path: Path | None = None
    outputs: OutputClaim | None = None  # the plan's, released by ``finish_run``

    @property
    def records_path(self) -> Path | None:
        """Where the run's records go: the recording, or the scratch one (--no-record)."""
        return self.recording_path or self.scratch_path

    def remove_scratch(self) -> None:
        if self.scratch_path is not None:
            shutil.rmtree(self.scratch_path.parent, ignore_errors=True)

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

    def check_server(self, control: Any = None) -> ServerExited | None:
        """Whether the run's server has exited on its own; the first time it is seen, the
        run is told through ``control`` (default: the run itself; the live UI's forwards
        to its run process): an ``error`` event with the code and last log lines, then a stop."""
        if self.server is None or self.server_exit is not None:
            return self.server_exit
        code = self.server.poll()
        if code is None:
            return None
        self.server_exit = ServerExited(code, self.server.tail, "during the run")
        tell = control if control is not None else self.run
        tell.server_exited(str(self.server_exit), code, self.server_exit.tail[-SERVER_TAIL_SHOWN:])
        return self.server_exit

    def close(self) -> None:
        """Stop the server (the recording is closed by ``execute``)."""
        if self.server is not None:
            self.server.stop()


def attach_hello(prepared: PreparedRun) -> dict[str, Any]:
    """What a viewer attaching to the run is told first (``app.control``)."""
    return {
        "recording": None if prepared.recording_path is None else str(prepared.recording_path),
        "rate_step_rps": prepared.run.options.rate_step_rps,
    }


def run_progress(run: Run) -> tuple[str, float, float]:
    """The run's state, seconds and target rate, without building a snapshot (its state
    file's figures, once a second)."""
    return run.series.state, run.now(), run.series.target_rps


def drain_policy(plan: RunPlan) -> DrainPolicy:
    """The run's drain policy: ``--drain``, else the scenario's ``drain:``, else wait."""
    return plan.config.drain or plan.scenario.drain or DrainPolicy()


def recorded_options(plan: RunPlan) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """What the recording's header keeps of the run's options (the header's ``options``,
    redacted by the runner) and of the server it started (``server_info.managed_server``)."""
    cli_options = plan.config.recorded_options()
    cli_options["target"] = plan.target
    cli_options["drain"] = str(drain_policy(plan))  # the one in force: the flag's, else the scenario's
    cli_options["header"] = plan.connection.header_names()  # header values are secrets
    managed = None
    if plan.server is not None:
        command = plan.server.command
        cli_options["serve"] = command.shown  # a --api-key inside it is masked
        managed = {
            "command": command.shown,
            "engine_args": command.engine_args(),
            "startup_s": plan.server.startup_s,
            "log": None if plan.server.log_path is None else str(plan.server.log_path),
        }
    return cli_options, managed


def record_failed_start(plan: RunPlan, error: UserError) -> Path | None:
    """A server that did not start still leaves a recording: the header (its command,
    engine arguments and log's path) and one ``error`` event with the reason — for a
    server that exited, its exit code and last log lines, as for one that exits mid-run —
    so `rampwatch report` and replay say why nothing ran. Returns its path (None: the run
    records nothing, or the disk refused)."""
    if plan.recording_path is None or plan.server is None or plan.server.guard_pid is None:
        return None  # nothing started (a taken port, a bad --server-log): bad input, not a failed start
    cli_options, managed = recorded_options(plan)
    data: dict[str, Any] = {}
    if isinstance(error, ServerExited):
        data = {"server_exit_code": error.server_exit_code, "server_log_tail": error.tail[-SERVER_TAIL_SHOWN:]}
    header = RunHeader(
        rampwatch_version=rampwatch_version(),
        started_at_unix=time.time(),
        target=redact_text(plan.target),
        model=plan.config.model or plan.scenario.model or "",
        scenario_name=plan.scenario.name,
        scenario=plan.scenario.raw,
        options=redact_options(cli_options),
        planned_duration_s=plan.scenario.build_schedule().planned_duration_s,
        server_info={"managed_server": managed},
        host_info=host_info(),
    )
    secrets = plan.connection.secrets() | plan.server.command.secrets()
    writer = RecordingWriter(plan.recording_path, secrets=secrets or None)
    writer.on_start(header)
    writer.on_event(Event(0.0, "error", f"the server did not start: {error}", data))
    writer.close(0.0)
    return None if writer.error is not None else plan.recording_path


def load_senders(config: RunConfig) -> SenderFactory | None:
    """What the run sends through: its own client (None), ``--workers N`` processes, or
    Ray actors with ``--ray`` (then ``--workers`` is their number)."""
    if config.ray is not None:
        return ray_workers(config.ray, config.workers, config.max_clock_offset)
    workers = config.workers or 1
    return LocalWorkers(workers) if workers > 1 else None


def build_run(plan: RunPlan) -> PreparedRun:
    """The run over a plan whose server (if any) is ready."""
    config, connection, target = plan.config, plan.connection, plan.target
    scenario = plan.scenario
    model, models_answer = config.model or scenario.model, None
    if not model:
        model, models_answer = discover_model(target, connection, config.api_key_source())
    cli_options, managed = recorded_options(plan)
    options = RunOptions(
        target=target,
        model=model,
        connection=connection,
        models_answer=models_answer,
        metrics_urls=plan.metrics_urls or [target + "/metrics"],
        scrape_interval_s=config.scrape_interval,
        metrics_max_bytes=config.metrics_max_bytes,
        request_timeout_s=config.request_timeout,
        stop_grace_s=config.stop_grace,
        drain=drain_policy(plan),
        rate_step_rps=config.rate_step,
        tokenizer=plan.tokenizer,
        cli_options=cli_options,
        gpu_price_per_hour=config.gpu_price_per_hour,
        save_generated_texts=config.save_generated_texts,
        managed_server=managed,
        gpu_metrics_urls=plan.gpu.dcgm_urls,
        gpu_nvml=plan.gpu.nvml,
        gpu_note=plan.gpu.note,
        gpu_simulated=plan.gpu.simulated,
        cache_salt_policy=plan.cache_policy[0],
        cache_salt=plan.cache_policy[1],
        server_limits=ServerLimits.from_engine_args(plan.server.command.engine_args()) if plan.server else None,
        sender_factory=load_senders(config),
    )
    # --no-record: a scratch recording all the same, so that the final figures are read
    # back from a file, never held in RAM, on one path with or without the flag.
    scratch = (
        None if plan.recording_path is not None else Path(tempfile.mkdtemp(prefix="rampwatch-run-")) / "records.rwrec"
    )
    if scratch is not None:  # also when the run ends on an error before finish_run
        atexit.register(shutil.rmtree, scratch.parent, ignore_errors=True)
    secrets = connection.secrets() | (plan.server.command.secrets() if plan.server is not None else set())
    recorder = RecordingWriter(plan.recording_path or scratch, secrets=secrets or None)
    run = Run(scenario, options, sinks=[recorder])
    return PreparedRun(
        run=run,
        config=config,
        server=plan.server,
        recorder=recorder,
        recording_path=plan.recording_path,
        result_json_path=plan.result_json_path,
        scratch_path=scratch,
        outputs=plan.outputs,
    )


def prepare_run(
    config: RunConfig, out: TextIO = sys.stdout, on_plan: Callable[[RunPlan], object] | None = None
) -> PreparedRun:
    """Plan the run (``on_plan`` is told of it), start its server (progress lines on
    ``out``) and build the run."""
    plan = plan_run(config)
    if on_plan is not None:
        on_plan(plan)
    try:
        if plan.server is not None:
            try:
                start_server(plan.server, config.serve_timeout, out)
            except UserError as exc:
                note_failed_start(plan, exc)
                raise
        return build_run(plan)
    except BaseException:
        if plan.server is not None:
            plan.server.stop()
        raise


def note_failed_start(plan: RunPlan, error: UserError) -> None:
    """Record a server that did not start (``record_failed_start``) and say where."""
    path = record_failed_start(plan, error)
    if path is not None:
        print(f"recording: {path} (the failed start)", file=sys.stderr)


def final_figures(prepared: PreparedRun, result: RunResult) -> FinalFigures:
    """The run's final figures: from its recording, streamed block by block through the
    code `rampwatch report` uses (so the two agree by construction, exact percentiles as
    vLLM bench computes them); from the records when the run kept them in RAM
    (``RunOptions.keep_records``); else — the recording failed or cannot be read — the
    live run-so-far summary (bounded: percentiles within a 1 % bucket), said so."""
    config = prepared.config
    if result.requests:
        # Over the run's window (first send to last completion, as vLLM and `rampwatch
        # report` measure it), not the whole run: the wait for the server and the drain are not load.
        summary = summarise_requests(
            result.header,
            result.requests,
            result.samples,
            result.events,
            slo=prepared.run.scenario.slo,
            gpu_price_per_hour=config.gpu_price_per_hour,
            idle_duration_s=result.duration_s,
            client=result.live_summary.client if result.live_summary is not None else None,
        )
        classes = class_summaries(
            result.header, result.requests, result.duration_s, gpu_price_per_hour=config.gpu_price_per_hour
        )
        return FinalFigures(summary, turn_table(result.requests, finished=result.sessions_finished), classes)
    path = prepared.records_path
    unreadable = None  # a recording that failed is said by its own line (finish_run)
    if path is not None and result.recording_error is None:
        try:
            recording = open_recording(path)
            summary = summarise(recording, slo=prepared.run.scenario.slo, gpu_price_per_hour=config.gpu_price_per_hour)
            return FinalFigures(summary, recording_turns(recording), class_figures(recording), recording)
        except (UserError, OSError) as exc:
            unreadable = str(exc)
    summary = result.live_summary or summarise_requests(result.header, [], [], result.events)
    return FinalFigures(
        summary, None, {}, note="live figures: percentiles within 1 %, not exact", unreadable=unreadable
    )


def finish_run(prepared: PreparedRun, result: RunResult, out: TextIO = sys.stdout) -> int:
    """Summary, result JSON, exit code. Shared by the headless and the TUI paths."""
    try:
        return _finish_run(prepared, result, out)
    finally:
        prepared.remove_scratch()
        if prepared.outputs is not None:
            prepared.outputs.release()


def _finish_run(prepared: PreparedRun, result: RunResult, out: TextIO) -> int:
    figures = final_figures(prepared, result)
    try:
        return _report_run(prepared, result, figures, out)
    finally:
        if figures.recording is not None:
            figures.recording.close()


def write_result_json(prepared: PreparedRun, result: RunResult, figures: FinalFigures) -> str | None:
    """The run's result JSON (if it has one); why it could not be written, else None."""
    path, config = prepared.result_json_path, prepared.config
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        detailed = config.detailed
        if figures.recording is not None:  # the per-request lists streamed from the recording
            write_bench_result(figures.recording, figures.summary, path, detailed, result.generated_texts)
        else:
            bench = to_bench_result(figures.summary, result.header, result.requests, detailed=detailed)
            if figures.classes:  # a mixture: each class's figures in the same schema
                bench["per_class"] = per_class_results(
                    result.header, result.requests, figures.classes, detailed=detailed
                )
            with private_file(path, "wb") as fh:
                fh.write(dumps_bench_result({**bench, **turn_sections(figures.turns)}))
    except OSError as exc:  # e.g. the disk filled up during the run: the summary stands
        return str(exc.strerror or exc)
    return None


def _report_run(prepared: PreparedRun, result: RunResult, figures: FinalFigures, out: TextIO) -> int:
    config = prepared.config
    summary, turns, classes = figures.summary, figures.turns, figures.classes
    # Written before anything is printed: a reader of the output that leaves early
    # (`| head`) ends the printing, never the run's files.
    result_json_error = write_result_json(prepared, result, figures)
    width = terminal_width(out)  # a terminal's: lines and tables wrap whole words, never mid-word
    print(fit_lines(format_summary(summary), width), file=out)
    if figures.note is not None:
        print(fit_lines(f"({figures.note})", width), file=out)
    if turns is not None:
        print(f"\n{fill_to(f'Turns ({TURNS_NOTE})', width)}\n{turns.text()}", file=out)
    if classes:  # a mixture: its classes side by side, as `rampwatch report` prints them
        table = class_table({name: s.to_dict() for name, s in classes.items()})
        print(f"\n{fill_to(f'Classes ({CLASS_NOTE})', width)}\n{table.text(width)}", file=out)
    code = 0
    if result_json_error is not None:
        print(f"rampwatch run: cannot write {prepared.result_json_path}: {result_json_error}", file=sys.stderr)
        code = 1
    elif prepared.result_json_path is not None:
        print(f"result JSON: {prepared.result_json_path}", file=out)
    if prepared.recording_path is not None:
        print(f"recording: {prepared.recording_path}", file=out)
    for event in result.events:  # what stopped the run from inside the client: said, not only recorded
        if event.kind == "error" and {"load_worker_lost", "request_builder_lost"} & set(event.data or {}):
            print(f"rampwatch run: {event.message}", file=sys.stderr)
    if result.recording_error is not None:
        if prepared.recording_path is not None:
            what = f"recording {prepared.recording_path}"
        else:
            what = f"the run's scratch recording {prepared.scratch_path} (--no-record)"
        print(f"rampwatch run: {what} failed: {result.recording_error}", file=sys.stderr)
        code = 1
    elif figures.unreadable is not None:
        print(f"rampwatch run: cannot read the run's records back: {figures.unreadable}", file=sys.stderr)
        code = 1
    if prepared.server_exit is not None:
        print_server_tail(prepared.server_exit.tail)
        print(
            f"rampwatch run: {prepared.server_exit} (exit {SERVER_EXITED_EXIT}; "
            f"server log: {prepared.server.log_path if prepared.server is not None else '-'})",
            file=sys.stderr,
        )
        return SERVER_EXITED_EXIT
    if prepared.restart_error is not None:
        if isinstance(prepared.restart_error, ServerExited):
            print_server_tail(prepared.restart_error.tail)
        log = config.server_log  # where plan_run put the log, also of the restarted server
        if log is None and prepared.recording_path is not None:
            log = server_log_path(prepared.recording_path)
        print(
            f"rampwatch run: the server restart failed: {prepared.restart_error} "
            f"(exit {SERVER_EXITED_EXIT}; server log: {log or '-'})",
            file=sys.stderr,
        )
        return SERVER_EXITED_EXIT
    assert result.counts is not None
    if not result.counts.ended:
        print("rampwatch run: no request was sent", file=sys.stderr)
        return 1
    drained = [e for e in result.events if e.kind == "cancel" and "drain" in e.data]
    if drained:
        cancelled = sum(int(e.data.get("requests", 0)) for e in drained)
        print(
            f"rampwatch run: the drain policy ({drained[0].data['drain']}) cancelled {cancelled:,} requests still "
            "in flight at its end; the summary counts them as cancelled, not failed",
            file=sys.stderr,
        )
    if result.interrupted:
        print(
            f"rampwatch run: stopped before the end (exit {INTERRUPTED_EXIT}): the summary covers "
            f"{summary.completed:,} completed, {summary.failed:,} failed and {summary.cancelled:,} cancelled requests",
            file=sys.stderr,
        )
        return INTERRUPTED_EXIT
    if result.error_rate > config.max_error_rate:
        print(
            f"rampwatch run: error rate {result.error_rate:.1%} exceeds --max-error-rate {config.max_error_rate:.1%}",
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
            try:
                print(progress_line(self.snapshot(), self.interval_s), file=self.out, flush=True)
            except BrokenPipeError:  # `| head` has left: the run goes on, its output to /dev/null
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
