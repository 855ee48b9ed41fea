"""The simulator in a child process, for the load generator's embedded default.

::

    with EmbeddedSim(SimConfig(hardware="l4", model="llama-3.1-8b")) as sim:
        run_load_against(sim.url)

The child runs ``python -m sim.cli`` (the ``rampwatch sim`` code) on a free loopback
port, so its CPU never competes inside the load process. It dies with the process that
started it: the kernel signals it when that process exits (Linux's parent-death signal;
start it from the main thread, since the signal follows the thread that spawned it), and
it also exits when the pipe it holds on its stdin reaches EOF.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque

from rampwatch.core.errors import UserError
from rampwatch.sim.config import SimConfig

_URL_RE = re.compile(r"on (http://\S+) ")


def config_to_argv(config: SimConfig) -> list[str]:
    """The ``rampwatch sim`` flags that reproduce ``config``."""
    argv = [
        "--hardware",
        config.hardware,
        "--model",
        config.model,
        "--seed",
        str(config.seed),
        "--speed",
        repr(config.speed),
        "--block-size",
        str(config.block_size),
        "--gpu-memory-utilization",
        repr(config.gpu_memory_utilization),
        "--max-num-seqs",
        str(config.max_num_seqs),
        "--eos-probability",
        repr(config.eos_probability),
        "--engines",
        str(config.engines),
        "--routing",
        config.routing,
        "--error-rate",
        repr(config.faults.error_rate),
        "--abort-rate",
        repr(config.faults.abort_rate),
        "--metrics-error-rate",
        repr(config.faults.metrics_error_rate),
        "--stall-for",
        repr(config.faults.stall_for),
    ]
    if config.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    if config.tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if not config.enable_chunked_prefill:
        argv.append("--no-enable-chunked-prefill")
    if config.step_overhead_s is not None:
        argv += ["--step-overhead-ms", repr(config.step_overhead_s * 1e3)]
    if config.per_request_overhead_s is not None:
        argv += ["--per-request-overhead-us", repr(config.per_request_overhead_s * 1e6)]
    if config.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", config.kv_cache_dtype]
    if config.num_gpu_blocks is not None:
        argv += ["--num-gpu-blocks", str(config.num_gpu_blocks)]
    if config.max_model_len is not None:
        argv += ["--max-model-len", str(config.max_model_len)]
    if config.served_model_name is not None:
        argv += ["--served-model-name", config.served_model_name]
    if config.faults.stall_at is not None:
        argv += ["--stall-at", repr(config.faults.stall_at)]
    if not config.enable_prefix_caching:
        argv.append("--no-enable-prefix-caching")
    if config.gpu_telemetry:
        argv.append("--gpu-telemetry")
    return argv


class EmbeddedSim:
    """A simulator subprocess. ``.url`` and ``.pid`` are set once ``start()`` returns."""

    def __init__(
        self,
        config: SimConfig | None = None,
        host: str = "127.0.0.1",
        start_timeout: float = 30.0,
        python: str | None = None,
    ) -> None:
        self.config = (config or SimConfig()).resolved()  # bad presets fail here, in the parent
        self.host = host
        self.start_timeout = start_timeout
        self.python = python or sys.executable
        self.url: str | None = None
        self.process: subprocess.Popen | None = None
        self._stderr_tail: deque[str] = deque(maxlen=20)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> EmbeddedSim:
        cmd = [
            self.python,
            "-m",
            "rampwatch.sim.cli",
            *config_to_argv(self.config),
            "--host",
            self.host,
            "--port",
            "0",
            "--exit-on-stdin-eof",
            "--parent-pid",
            str(os.getpid()),
        ]
        self.process = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.monotonic() + self.start_timeout
        line = self._read_banner(deadline)
        match = _URL_RE.search(line or "")
        if match is None:
            self.stop()
            raise UserError(f"embedded simulator failed to start: {self._failure_text(line)}")
        self.url = match.group(1)
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        self._wait_healthy(deadline)
        return self

    def _read_banner(self, deadline: float) -> str | None:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(max(0.0, deadline - time.monotonic()))
        return result[0] if result else None

    def _drain_stdout(self) -> None:
        for _line in self.process.stdout:
            pass

    def _drain_stderr(self) -> None:
        for line in self.process.stderr:
            self._stderr_tail.append(line.rstrip())

    def _failure_text(self, line: str | None) -> str:
        time.sleep(0.2)
        tail = " | ".join(self._stderr_tail)
        return tail or (line or "").strip() or "no output"

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1.0) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        self.stop()
        raise UserError(f"embedded simulator at {self.url} did not answer /health: {self._failure_text(None)}")

    def stop(self, timeout: float = 5.0) -> int | None:
        """Stop the child (SIGTERM, then SIGKILL after ``timeout``); returns its exit code."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        return proc.returncode

    def __enter__(self) -> EmbeddedSim:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
