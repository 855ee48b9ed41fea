"""LoRA adapters on the real vLLM CPU server: two tiny adapters (rank 8 on q_proj and
v_proj, made in the fixture by scripts/make_tiny_lora.py with the vLLM venv's torch),
served with --enable-lora --lora-modules; a short rampwatch ramp over them sends each
request to its seeded adapter, the per-adapter figures count them, and the server's
vllm:lora_requests_info is read from its /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.tokenizers import load_tokenizer
from rampwatch.record.reader import open_recording
from tests.conftest import _load_vllm_harness

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DURATION_S = 12
SCENARIO = """\
name: lora-real
endpoint: completions
seed: 3
schedule: {kind: linear, start_rps: 1, end_rps: 6, duration_s: 12, arrival: constant}
workload:
  input_tokens: 32
  output_tokens: 16
  adapters:
    - {name: sql, weight: 3}
    - {name: chat, weight: 1}
"""


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    """Its own vLLM server (the session's one serves no adapters), with two adapters."""
    harness = _load_vllm_harness()
    paths = harness.ensure_setup()
    adapters = tmp_path_factory.mktemp("adapters")
    for seed, name in enumerate(("sql", "chat")):
        subprocess.run(
            [paths.python, str(REPO / "scripts" / "make_tiny_lora.py"), paths.model, str(adapters / name), str(seed)],
            check=True,
            timeout=120,
        )
    server = harness.VllmServer(
        paths,
        extra_args=["--enable-lora", "--max-loras", "2", "--max-lora-rank", "8", "--lora-modules"]
        + [f"{name}={adapters / name}" for name in ("sql", "chat")],
    )
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def test_a_ramp_over_two_adapters_counts_each_and_reads_the_servers_lora_state(lora_server, tmp_path):
    scenario_path = tmp_path / "lora.yaml"
    scenario_path.write_text(textwrap.dedent(SCENARIO))
    recording, result_json = tmp_path / "lora.rwrec", tmp_path / "lora.json"
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", str(scenario_path), "--headless"]
        + ["--target", lora_server.url, "--tokenizer", lora_server.paths.model, "--max-error-rate", "0"]
        + ["--record", str(recording), "--result-json", str(result_json)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DURATION_S + 90,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "\nAdapters (" in proc.stdout
    with open_recording(recording) as rec:
        records = sorted(rec.requests, key=lambda r: r.id)
        samples = list(rec.samples)
    assert len(records) >= 30 and all(r.ok for r in records), {r.error for r in records if not r.ok}
    factory = RequestFactory(load_scenario(str(scenario_path)), load_tokenizer(lora_server.paths.model))
    assert [r.adapter for r in records] == [factory.next_request().adapter for _ in records]
    per_adapter = json.loads(result_json.read_text())["rampwatch_per_adapter"]
    assert list(per_adapter) == ["sql", "chat"]
    assert {name: a["completed"] for name, a in per_adapter.items()} == {
        name: sum(r.adapter == name for r in records) for name in ("sql", "chat")
    }
    lora = [s for s in samples if s.ok and s.max_lora is not None]
    assert lora, "no scrape carried vllm:lora_requests_info"
    assert all(s.max_lora == 2.0 for s in lora)
    seen = {name for s in lora for name in (s.lora_running or []) + (s.lora_waiting or [])}
    assert seen <= {"sql", "chat"}
