"""`/metrics` values no server could mean (NaN, ±Inf, negative gauges) and series given twice
on one page: dropped, or kept once at their last value, with one event naming the series;
nothing of them reaches the charts, the progress line, the summary or a JSON file, and every
JSON rampwatch writes is strict."""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.app.session import serving_sim
from rampwatch.loadgen.server.scrape import MAX_REJECTED_SERIES, parse_dcgm, parse_metrics
from rampwatch.record.reader import open_recording
from rampwatch.sim.config import SimConfig
from tests.faults.hostile_metrics import serve_metrics

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "line, field, key, note",
    [
        ("vllm:num_requests_running NaN", "running", "vllm:num_requests_running", "NaN: dropped"),
        ("vllm:num_requests_running +Inf", "running", "vllm:num_requests_running", "+Inf: dropped"),
        ("vllm:num_requests_waiting -Inf", "waiting", "vllm:num_requests_waiting", "-Inf: dropped"),
        (
            'vllm:num_requests_waiting{engine="0"} -5',
            "waiting",
            'vllm:num_requests_waiting{engine="0"}',
            "negative (-5): dropped",
        ),
        ("vllm:kv_cache_usage_perc NaN", "kv_usage", "vllm:kv_cache_usage_perc", "NaN: dropped"),
        (
            "vllm:generation_tokens_total Inf",
            "generation_tokens_total",
            "vllm:generation_tokens_total",
            "+Inf: dropped",
        ),
    ],
)
def test_an_unusable_value_is_dropped_and_named(line, field, key, note):
    sample = parse_metrics(f"vllm:prompt_tokens_total 10\n{line}\n", "http://s/metrics", 1.0)
    assert sample.ok and sample.backend == "vllm"
    assert getattr(sample, field) is None
    assert key not in sample.raw
    assert sample.rejected == {key: note}
    assert sample.prompt_tokens_total == 10.0  # the page's usable series stand


def test_a_dropped_engine_leaves_the_others_summed():
    page = 'vllm:num_requests_running{engine="0"} 2\nvllm:num_requests_running{engine="1"} +Inf\n'
    sample = parse_metrics(page, "u", 0.0)
    assert sample.running == 2.0 and sample.per_engine == {"0": {"running": 2.0}}


def test_a_series_given_twice_keeps_its_last_value_not_the_sum():
    page = (
        'vllm:num_requests_running{engine="0"} 3\n'
        'vllm:num_requests_running{engine="1"} 1\n'
        'vllm:num_requests_running{engine="0"} 4\n'
    )
    sample = parse_metrics(page, "u", 0.0)
    assert sample.running == 5.0  # 4 + 1, not 3 + 1 + 4
    assert sample.raw['vllm:num_requests_running{engine="0"}'] == 4.0
    assert sample.rejected == {
        'vllm:num_requests_running{engine="0"}': "given twice on the page: the last value kept, not the sum"
    }


def test_a_page_of_many_unusable_series_names_a_bounded_few():
    page = "".join(f'vllm:num_requests_running{{model_name="m{i}"}} NaN\n' for i in range(5000))
    sample = parse_metrics(page, "u", 0.0)
    assert sample.running is None and len(sample.rejected) == MAX_REJECTED_SERIES


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-3"])
def test_a_dcgm_gauge_without_a_real_value_is_no_reading(value):
    page = f'DCGM_FI_DEV_POWER_USAGE{{gpu="0"}} {value}\nDCGM_FI_DEV_GPU_UTIL{{gpu="0"}} 40\n'
    sample = parse_dcgm(page, "u", 0.0)
    assert sample.ok and sample.gpus == {"0": {"util_pct": 40.0}}


def hostile_page():
    """A vLLM page whose engine 1 says it runs infinitely many requests, whose waiting gauge
    is negative, KV usage NaN, and whose engine 0's running series comes twice (3, then 4)."""
    tokens = itertools.count(100, 50)

    def page() -> str:
        return (
            'vllm:num_requests_running{engine="0"} 3\n'
            'vllm:num_requests_running{engine="1"} +Inf\n'
            'vllm:num_requests_waiting{engine="0"} -5\n'
            'vllm:kv_cache_usage_perc{engine="0"} NaN\n'
            f'vllm:generation_tokens_total{{engine="0"}} {next(tokens)}\n'
            'vllm:num_requests_running{engine="0"} 4\n'
        )

    return page


def rampwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def strict_json(text: str):
    """``json.loads`` that refuses NaN and Infinity, as jq, browsers, Go and Rust do."""
    return json.loads(text, parse_constant=lambda word: pytest.fail(f"not strict JSON: {word}"))


@pytest.mark.timing
@pytest.mark.slow
def test_a_hostile_metrics_page_reaches_no_output_and_every_json_is_strict(tmp_path):
    recording, result = tmp_path / "r.rwrec", tmp_path / "r.json"
    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim, serve_metrics(hostile_page()) as metrics:
        proc = rampwatch(
            "run", "random", "--headless", "--target", sim.url, "--metrics-url", metrics,
            "--duration", "3", "--start-rps", "4", "--end-rps", "4", "--set", "workload.output_tokens=8",
            "--progress-interval", "1", "--record", str(recording), "--result-json", str(result),
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    output = proc.stdout + proc.stderr
    assert not re.search(r"\b(nan|inf)\b|-5\b", output, re.IGNORECASE), output
    progress = [line for line in proc.stdout.splitlines() if " | server run " in line]
    assert progress and all(re.search(r"server run (4|-) wait - KV -%", line) for line in progress), progress
    assert re.search(r"Max running requests: +4 *\n", proc.stdout), proc.stdout

    figures = strict_json(result.read_text())
    assert figures["rampwatch_server"]["max_running"] == 4.0
    assert (
        figures["rampwatch_server"]["max_waiting"] is None and figures["rampwatch_server"]["max_kv_usage_pct"] is None
    )
    report = rampwatch("report", str(recording), "--json")
    assert report.returncode == 0, report.stderr
    strict_json(report.stdout)
    export = rampwatch("export", str(recording), "--format", "json", "-o", str(tmp_path / "e.json"))
    assert export.returncode == 0, export.stderr
    strict_json((tmp_path / "e.json").read_text())

    with open_recording(recording) as rec:
        said = [e for e in rec.events if "rejected_series" in e.data]
        samples = [s for s in rec.samples if s.ok]
    # one event per series, not one per scrape
    assert sorted(e.data["rejected_series"] for e in said) == [
        'vllm:kv_cache_usage_perc{engine="0"}',
        'vllm:num_requests_running{engine="0"}',
        'vllm:num_requests_running{engine="1"}',
        'vllm:num_requests_waiting{engine="0"}',
    ]
    assert f'{metrics}: /metrics vllm:num_requests_running{{engine="1"}}: +Inf: dropped' in [e.message for e in said]
    assert len(samples) >= 3
    assert all(s.running == 4.0 and s.waiting is None and s.kv_usage is None for s in samples)
    assert all(math.isfinite(v) and v >= 0 for s in samples for v in s.raw.values())
