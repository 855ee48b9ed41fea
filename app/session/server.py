"""The server a run starts: ``--serve``, or the embedded simulator (which is ``--serve
"rampwatch sim …"``), its start with progress lines, and its log's last lines when it fails."""

from __future__ import annotations

import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TextIO
from urllib.parse import urlsplit

from rampwatch.app.run_config import RunConfig
from rampwatch.app.session.embedded_sim import sim_choice
from rampwatch.core.errors import ServerExited, UserError
from rampwatch.core.redact import redact_text
from rampwatch.loadgen.server.managed import PHASE_STARTING, ManagedServer, ServeCommand
from rampwatch.loadgen.transport.server_probe import normalize_base_url
from rampwatch.sim.cli import config_to_argv
from rampwatch.sim.config import SimConfig

# Headless, between the lines that say a server is still starting.
SERVER_PROGRESS_INTERVAL_S = 30.0


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` inside the block, as Ctrl-C does (a
    server's start, the cool-down between repeats: the caller's Ctrl-C path then runs);
    the handlers before are put back after it. Signals reach the main thread only: on
    another thread nothing is changed."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def check_url(flag: str, url: str) -> str:
    if not url.startswith(("http://", "https://")):
        raise UserError(f"{flag} {redact_text(url)!r}: expected an http:// or https:// URL")
    try:
        urlsplit(url).port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise UserError(f"{flag} {redact_text(url)!r}: {exc}") from None
    return url.rstrip("/")


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


def serve_command(
    config: RunConfig, seed: int | None = None, gpu_telemetry: bool = False, workload: dict[str, Any] | None = None
) -> ServeCommand | None:
    """What `rampwatch run` starts: ``--serve``, else (no ``--target``) the embedded
    simulator (serving its DCGM page with ``gpu_telemetry``, and what the scenario's
    ``workload`` needs of it: ``app.session.embedded_sim``); None when it only connects
    to ``--target``."""
    target = normalize_base_url(check_url("--target", config.target)) if config.target else None
    if config.serve is not None:
        return ServeCommand.parse(config.serve, target=target)
    if target is not None:
        return None
    choice = sim_choice(workload or {}, config.sim_model)
    sim_config = SimConfig(
        hardware=config.sim_hardware,
        model=choice.model,
        seed=seed if seed is not None else 0,
        gpu_telemetry=gpu_telemetry,
        lora=choice.lora,
        reasoning=choice.reasoning,
    )
    try:
        return ServeCommand.parse(sim_serve_text(sim_config))
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

    try:
        with signals_interrupt():
            startup = server.start(timeout_s, on_phase=on_phase)
    except ServerExited as exc:
        done.set()
        print_server_tail(exc.tail)
        raise
    finally:
        done.set()
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
