"""A 60 s linear ramp through `rampwatch run` against the real vLLM CPU server: every
request succeeds with the length asked for, and the client's token counts equal the
server's own counters over the run."""

from __future__ import annotations

import math
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DURATION_S = 30
OUTPUT_TOKENS = "{dist: uniform, min: 32, max: 64}"
INPUT_TOKENS = "{dist: uniform, min: 16, max: 64}"


def counters(url: str) -> dict[str, float]:
    """Sums of vLLM's token counters (over all label sets)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {"prompt": 0.0, "generation": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vllm:prompt_tokens_total":
                out["prompt"] += sample.value
            elif sample.name == "vllm:generation_tokens_total":
                out["generation"] += sample.value
    return out


def test_linear_ramp_matches_the_servers_counters(vllm_server, tmp_path):
    from rampwatch.core.figures.series import SeriesBuilder
    from rampwatch.loadgen.workload.request_factory import RequestFactory
    from rampwatch.loadgen.workload.scenario import load_scenario
    from rampwatch.loadgen.workload.tokenizers import load_tokenizer
    from rampwatch.record.reader import open_recording

    model_dir = vllm_server.paths.model
    recording = tmp_path / "ramp.rwrec"
    result_json = tmp_path / "ramp.json"
    sets = [
        ("workload.input_tokens", INPUT_TOKENS),
        ("workload.output_tokens", OUTPUT_TOKENS),
        ("schedule.arrival", "constant"),
    ]
    before = counters(vllm_server.url)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            "random",
            "--headless",
            "--target",
            vllm_server.url,
            "--tokenizer",
            model_dir,
            "--duration",
            str(DURATION_S),
            "--start-rps",
            "1",
            "--end-rps",
            "8",
            "--seed",
            "7",
            "--record",
            str(recording),
            "--result-json",
            str(result_json),
            "--max-error-rate",
            "0",
            *[a for k, v in sets for a in ("--set", f"{k}={v}")],
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=DURATION_S + 60,
    )
    after = counters(vllm_server.url)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr

    with open_recording(recording) as rec:
        records = sorted(list(rec.requests), key=lambda r: r.id)
        samples = list(rec.samples)
        ticks = list(rec.ticks)
    # 1 -> 8 req/s over 30 s is 135 requests
    assert 130 <= len(records) <= 137
    assert all(r.ok for r in records), {r.error_class for r in records if not r.ok}
    assert all(r.tokens_from_usage and r.finish_reason == "length" for r in records)

    # What was asked: the same seeded factory, replayed with the same tokenizer.
    scenario = load_scenario(
        "random", overrides=sets, flags={"duration": DURATION_S, "start_rps": 1, "end_rps": 8, "seed": 7}
    )
    factory = RequestFactory(scenario, load_tokenizer(model_dir))
    asked = [factory.next_request() for _ in records]
    assert [r.completion_tokens for r in records] == [a.payload["max_tokens"] for a in asked]
    # exact prompt lengths: the factory counted with the server's own tokenizer
    assert [r.prompt_tokens for r in records] == [a.expected_prompt_tokens for a in asked]

    assert sum(r.completion_tokens for r in records) == after["generation"] - before["generation"]
    assert sum(r.prompt_tokens for r in records) == after["prompt"] - before["prompt"]

    import json

    result = json.loads(result_json.read_text())
    assert result["completed"] == len(records) and result["failed"] == 0
    assert result["total_output_tokens"] == after["generation"] - before["generation"]
    assert result["total_input_tokens"] == after["prompt"] - before["prompt"]

    builder = SeriesBuilder()
    for sample in samples:
        builder.on_scrape(sample)
    series = builder.snapshot().series
    for name in ("running", "kv_usage_pct", "server_generation_tps"):
        values = [v for v in series[name] if not math.isnan(v)]
        assert len(values) >= DURATION_S // 2, name
    # The running gauge is read every second; a short request on the tiny model runs for a
    # few ms, so a scrape often finds none running (30 zero reads happened): it is bounded
    # by what the client had in flight, not required to catch one.
    peak_in_flight = max(max(t.in_flight, t.peak_in_flight or 0) for t in ticks)
    assert 0 <= max(v for v in series["running"] if not math.isnan(v)) <= peak_in_flight
    assert max(v for v in series["server_generation_tps"] if not math.isnan(v)) > 100
