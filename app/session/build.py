"""A run built over its plan: the model asked of the server when not given, the
``RunOptions``, the recording writer (a scratch one with ``--no-record``), and the
``PreparedRun`` that executes it; a server that did not start still leaves a recording."""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rampwatch.app.ray_run import ray_workers
from rampwatch.app.run_config import RunConfig
from rampwatch.app.session.embedded_sim import notes_line
from rampwatch.app.session.plan import RunPlan, drain_policy, plan_run, recorded_options
from rampwatch.app.session.prometheus_port import SERVING
from rampwatch.app.session.server import SERVER_TAIL_SHOWN, start_server
from rampwatch.core.errors import ServerExited, UserError
from rampwatch.core.figures.server_limits import ServerLimits
from rampwatch.core.files import OutputClaim
from rampwatch.core.redact import redact_options, redact_text
from rampwatch.core.timeline import Event, RunHeader, TimelineSink
from rampwatch.core.version import rampwatch_version
from rampwatch.loadgen.run import eventloop
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.result import RunResult
from rampwatch.loadgen.run.runner import Run, host_info
from rampwatch.loadgen.run.worker_pool import LocalWorkers
from rampwatch.loadgen.run.workers import SenderFactory
from rampwatch.loadgen.server.managed import ManagedServer
from rampwatch.loadgen.transport.connection import Connection
from rampwatch.loadgen.transport.server_probe import ModelsAnswer, first_model_of, probe_models
from rampwatch.record.writer import RecordingWriter


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
        search=config.search,
        tokenizer=plan.tokenizer,
        cli_options=cli_options,
        gpu_price_per_hour=config.gpu_price_per_hour,
        save_generated_texts=config.save_generated_texts,
        managed_server=managed,
        gpu_metrics_urls=plan.gpu.dcgm_urls,
        gpu_nvml=plan.gpu.nvml,
        gpu_note=plan.gpu.note,
        server_notes=(notes_line(plan.sim_notes),) if plan.sim_notes else (),
        gpu_simulated=plan.gpu.simulated,
        cache_salt_policy=plan.cache_policy[0],
        cache_salt=plan.cache_policy[1],
        server_limits=ServerLimits.from_engine_args(plan.server.command.engine_args()) if plan.server else None,
        sender_factory=load_senders(config),
    )
    # --no-record: a scratch recording all the same, so that the final figures are read
    # back from a file, never held in RAM, on one path with or without the flag.
    records_path, scratch = plan.recording_path, None
    if records_path is None:
        records_path = scratch = Path(tempfile.mkdtemp(prefix="rampwatch-run-")) / "records.rwrec"
        atexit.register(shutil.rmtree, scratch.parent, ignore_errors=True)  # also when the run ends on an error
    secrets = connection.secrets() | (plan.server.command.secrets() if plan.server is not None else set())
    recorder = RecordingWriter(records_path, secrets=secrets or None)
    run = Run(scenario, options, sinks=[recorder, *prometheus_sinks(config, scenario.raw)])
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


def prometheus_sinks(config: RunConfig, scenario: Any = None) -> list[TimelineSink]:
    """``--prometheus-port``'s target, its port tried now (one in use: a one-line
    ``UserError``); it serves from the run's start, in the process that runs the load. A
    ``scenario`` (its raw mapping) with more classes than are labelled by name: one line."""
    if config.prometheus_port is None:
        return []
    # prometheus_client is imported only by a run that serves it
    from rampwatch.loadgen.run.prometheus_target import PrometheusTarget, class_label_note, scenario_classes

    note = class_label_note(scenario_classes(scenario))
    if note is not None:
        print(f"rampwatch run: {note}", file=sys.stderr, flush=True)

    address = (config.prometheus_host, config.prometheus_port)
    previous = _PROMETHEUS_SERVING.pop(address, None)
    if previous is not None:  # a sweep's previous configuration: its run has ended
        previous.close()
    target = PrometheusTarget(config.prometheus_port, config.prometheus_host, config.run_id)
    target.check_port()
    _PROMETHEUS_SERVING[address] = target
    atexit.register(target.close)
    return [target]


# The Prometheus target of this process's last run on each address: it serves until the
# process exits (after the run, ``--prometheus-linger`` waits for a scrape of its final
# figures: app.session.prometheus_linger) or the next run on the address (a sweep)
# replaces it. Shared with the plan's check of the port (app.session.prometheus_port).
_PROMETHEUS_SERVING = SERVING


def prometheus_targets() -> list[Any]:
    """This process's ``--prometheus-port`` targets (``PrometheusTarget``)."""
    return list(_PROMETHEUS_SERVING.values())


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
            if plan.sim_notes:  # what the embedded simulator serves for this scenario
                print(notes_line(plan.sim_notes), file=out, flush=True)
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
