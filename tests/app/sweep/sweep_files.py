"""Sweep files and commands the sweep's tests share: a minimal sweep file, a short
simulator sweep, a small one loaded past its knees, a free port, and `rampwatch` run as a
child process."""

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

GOOD_SWEEP = """\
scenario: chat
serve: vllm serve Qwen/Qwen2.5-0.5B --port 8311
matrix:
  product:
    max_num_seqs: [8, 64]
load:
  ramp: {start_rps: 1, end_rps: 20, duration_s: 30}
"""


def write(tmp_path, text, name="s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def sweep_file(tmp_path: Path, sets: str, duration_s: float = 3.0) -> Path:
    """A short sweep: chat with short answers, a 3 s ramp (requests, recordings and GPU
    gauges for every configuration; no knee needed), each configuration given."""
    path = tmp_path / "sweep.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            name: short
            scenario: chat
            set:
              workload.output_tokens: {{dist: uniform, min: 10, max: 30}}
            serve: rampwatch sim --hardware h100 --model llama-3.1-8b --port {free_port()} --gpu-telemetry
            vllm_model: meta-llama/Llama-3.1-8B-Instruct
            matrix:
              sets: {sets}
            load:
              ramp: {{start_rps: 2, end_rps: 6, duration_s: {duration_s}}}
            slo: ttft_p99<500ms,itl_p99<50ms
            stop_grace_s: 1
            output_dir: {tmp_path / "out"}
            """
        )
    )
    return path


def small_sim_sweep(tmp_path: Path, caps: str) -> Path:
    """sweep-sim's shape made small: its workload and ramp slope (0.43 req/s a second),
    batch caps whose knees the ramp passes well before its end."""
    path = tmp_path / "sweep.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            scenario: chat
            set:
              workload.output_tokens: {{dist: uniform, min: 80, max: 240}}
              workload.input_tokens: {{dist: uniform, min: 200, max: 600}}
            serve: rampwatch sim --hardware h100 --model llama-3.1-8b --port {free_port()}
            matrix:
              product: {{max-num-seqs: {caps}}}
            load:
              ramp: {{start_rps: 1, end_rps: 14, duration_s: 30}}
            early_stop: {{window_s: 3, min_requests: 5}}
            stop_grace_s: 1
            """
        )
    )
    return path


def rampwatch(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", *args], capture_output=True, text=True, timeout=200, **kwargs
    )


def sweep_state(path: Path, out: Path, *flags: str) -> dict:
    done = rampwatch("sweep", str(path), "--headless", "--output-dir", str(out), *flags)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "sweep.json").read_text())
