"""`rampwatch run --serve` with the real vLLM CPU server: rampwatch starts vLLM (the
command and environment `scripts/vllm_server.py` uses, given as the --serve text), waits
until it serves, runs a short ramp, records the command and startup time, and stops vLLM
with every process it started (its engine core too)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.record.reader import open_recording
from tests.conftest import _load_vllm_harness
from tests.processes import free_port, group_members, processes_naming, wait_group_gone

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# scripts/vllm_server.py's environment for the CPU server
ENV = ("VLLM_CPU_KVCACHE_SPACE=1", "VLLM_LOGGING_LEVEL=INFO", "HF_HUB_OFFLINE=1", "VLLM_NO_USAGE_STATS=1")


def test_run_serve_starts_real_vllm_records_it_and_leaves_no_process(tmp_path):
    harness = _load_vllm_harness()
    port = free_port()
    command = harness.VllmServer(harness.ensure_setup(), port=port).command()
    # --enforce-eager: no inductor compile at start (vLLM's CPU build compiles at each start,
    # 8-40 s of CPU: its compile cache fails to load); what is checked is rampwatch's --serve
    serve = " ".join([*ENV, shlex.join(command), "--max-num-seqs", "8", "--enforce-eager"])
    recording = tmp_path / "serve.rwrec"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            "random",
            "--headless",
            "--serve",
            serve,
            "--duration",
            "6",
            "--start-rps",
            "1",
            "--end-rps",
            "2",
            "--record",
            str(recording),
            "--set",
            "workload.input_tokens=32",
            "--set",
            "workload.output_tokens=16",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("server: starting (pid ")
    pid = int(lines[0].removeprefix("server: starting (pid ").split(")")[0])
    startup = next(line for line in lines if line.startswith("server: ready in "))
    assert float(startup.removeprefix("server: ready in ").removesuffix(" s")) > 1.0  # a real model loads
    assert f"against http://127.0.0.1:{port} (model tiny)" in proc.stdout
    assert "Successful requests:" in proc.stdout
    # vLLM and its engine core are gone: nothing of its group, nothing naming its port
    assert wait_group_gone(pid, timeout_s=60), group_members(pid)
    assert processes_naming(f"--port {port}") == []
    managed = open_recording(recording).header.server_info["managed_server"]
    assert managed["engine_args"]["max_num_seqs"] == "8"
    assert managed["engine_args"]["served_model_name"] == "tiny"
    assert managed["command"].startswith("VLLM_CPU_KVCACHE_SPACE=1 ")
    assert managed["startup_s"] > 1.0
    log = Path(str(recording) + ".server.log").read_text()
    assert "Starting vLLM" in log or "vLLM API server version" in log or "Application startup complete" in log
