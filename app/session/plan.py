"""A run's plan: its inputs checked and its outputs claimed before anything starts (a long
server start never ends on a bad flag): the scenario, the connection, the paths of the
recording, result JSON and server log, GPU telemetry, and what the recording's header
keeps of the options."""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rampwatch.app.run_config import RunConfig
from rampwatch.app.session.embedded_sim import embedded_sim_model, sim_choice
from rampwatch.app.session.prometheus_port import check_prometheus_port
from rampwatch.app.session.server import check_url, serve_command
from rampwatch.core.cache_salt import cache_salt_choice
from rampwatch.core.errors import UserError
from rampwatch.core.files import OutputClaim, check_replaceable, claim_outputs, is_special
from rampwatch.loadgen.run.drain import DrainPolicy
from rampwatch.loadgen.run.loop_health import check_gc_policy
from rampwatch.loadgen.server.gpu import NvmlReader, NvmlUnavailable
from rampwatch.loadgen.server.managed import ManagedServer, server_log_path
from rampwatch.loadgen.transport.connection import Connection, ca_context
from rampwatch.loadgen.transport.server_probe import normalize_base_url
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.tokenizers import load_tokenizer
from rampwatch.record.writer import default_recording_path
from rampwatch.sim.gpu_telemetry import DCGM_PATH


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
    # What the scenario added to the embedded simulator's flags, in words (embedded_sim).
    sim_notes: tuple[str, ...] = ()


def unused_default_path(path: Path) -> Path:
    """The default recording's path, or ``…-2.rwrec``, ``…-3.rwrec`` when a run of the
    same scenario started in the same second has it (or its result JSON or server log)."""
    candidate, n = path, 1
    while any(
        p is not None and p.exists() for p in (candidate, result_json_path(None, candidate), server_log_path(candidate))
    ):
        n += 1
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return candidate


def plan_run(config: RunConfig, claim: bool = True) -> RunPlan:
    """The run's inputs checked and its outputs claimed (``claim``; else only checked:
    ``--detach`` checks, the process it starts claims)."""
    check_gc_policy()  # RAMPWATCH_LOAD_GC: a value it does not know stops the run here
    scenario = load_scenario(config.scenario, overrides=config.scenario_sets(), flags=config.scenario_flags())
    if config.search is not None:
        from rampwatch.loadgen.run.search_control import check_schedule

        check_schedule(config.search, scenario.schedule_spec)
    connection = Connection(
        api_key=config.api_key_or_env, headers=config.header, insecure=config.insecure, ca_cert=config.ca_cert
    )
    if config.ca_cert:
        ca_context(config.ca_cert)  # a missing or bad file: one line now, not after the set-up
    check_prometheus_port(config)  # in use: one line now, not after --serve's server has started
    metrics_urls = [check_url("--metrics-url", u) for u in config.metrics_url]
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
    gpu_urls = [check_url("--gpu-metrics-url", u) for u in config.gpu_metrics_url]
    # The embedded simulator: no target yet (GPU telemetry is simulated or absent).
    gpu_plan = gpu_telemetry(config.gpu, gpu_urls, None) if config.embedded_sim else None
    # The embedded simulator serves what the scenario needs (app.session.embedded_sim).
    command = serve_command(
        config,
        seed=scenario.seed,
        gpu_telemetry=gpu_plan is not None and gpu_plan.simulated,
        workload=scenario.workload,
    )
    sim_notes = (
        sim_choice(scenario.workload, config.sim_model).notes if command is not None and config.embedded_sim else ()
    )
    config = replace(config, sim_model=embedded_sim_model(config, scenario.workload))  # the header keeps the one run
    server = None
    if command is None:
        # A base URL with or without /v1: requests go to BASE/v1/..., metrics to BASE/metrics.
        target = normalize_base_url(check_url("--target", config.target or ""))
    else:
        target = command.base_url  # --target's user:password, if any, is kept in it
    _check_one_authorization(target, config, connection)
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
        sim_notes=sim_notes,
    )


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
