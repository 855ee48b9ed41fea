"""`rampwatch sweep` over two configurations of the real vLLM CPU server (the tiny model):
each started and stopped by rampwatch, both recorded, the table printed, and no server
process left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rampwatch.record.reader import open_recording
from tests.processes import free_port, processes_naming

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


def _harness():
    from tests.conftest import _load_vllm_harness

    return _load_vllm_harness()


def test_sweep_two_configurations_of_real_vllm(tmp_path):
    harness = _harness()
    paths = harness.ensure_setup()
    port = free_port()
    # --enforce-eager: vLLM's CPU build otherwise compiles the model with inductor at every
    # start (its compile cache fails to load: "'function' object has no attribute
    # 'finalize_loading'"), 8-40 s of CPU each; what is checked is the sweep's servers
    serve = (
        "VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 "
        f"{paths.python} -m vllm.entrypoints.openai.api_server --model {paths.model} "
        f"--served-model-name {harness.SERVED_MODEL_NAME} --dtype float32 --max-model-len {harness.MAX_MODEL_LEN} --enforce-eager "
        f"--host 127.0.0.1 --port {port}"
    )
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        textwrap.dedent(
            f"""\
            name: real-vllm
            scenario: chat
            set:
              workload.output_tokens: {{dist: uniform, min: 16, max: 32}}
              workload.input_tokens: {{dist: uniform, min: 16, max: 64}}
            serve: "{serve}"
            matrix:
              product:
                max-num-seqs: [8, 64]
            load:
              ramp: {{start_rps: 1, end_rps: 4, duration_s: 8}}
            slo: ttft_p99<2s,itl_p99<500ms
            stop_grace_s: 5
            startup_timeout_s: 300
            output_dir: {tmp_path / "out"}
            """
        )
    )
    marker = f"--port {port}"
    done = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "sweep", str(sweep), "--headless"],
        capture_output=True,
        text=True,
        timeout=850,
        cwd=REPO,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert processes_naming(marker) == []  # both servers gone, and their guards
    state = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [r["config"] for r in state["rows"]] == ["--max-num-seqs 8", "--max-num-seqs 64"]
    for row in state["rows"]:
        assert row["status"] == "done" and row["startup_s"] > 0
        with open_recording(tmp_path / "out" / row["recording"]) as rec:
            assert rec.header.options["serve"].endswith(row["config"])
            assert rec.header.server_info  # the real server answered /v1/models
            assert any(r.ok for r in rec.requests)
        log = (tmp_path / "out" / f"{row['recording']}.server.log").read_text()
        assert "--max-num-seqs" in log  # the server's own log, kept beside the recording
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("#") and "knee rps" in line)
    assert lines[header + 1].split()[1:3] == ["--max-num-seqs", "8"]
    assert lines[header + 2].split()[1:3] == ["--max-num-seqs", "64"]
    assert "best under ttft_p99<2000ms,itl_p99<500ms" in done.stdout
