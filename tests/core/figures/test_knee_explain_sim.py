"""The knee's explanation end to end: `rampwatch run --headless` against a simulator set
up to hit one limit, the summary's line under the knee and the result JSON naming it.

The simulator runs 6x faster than real time so that a few seconds of ramp go well past
its capacity. The batch cap comes from the engine arguments of a simulator rampwatch
starts (`--serve`); against a server it only connects to, the KV cache's size and memory
share are read from its `vllm:cache_config_info` (the inferred cap of a server whose
arguments rampwatch does not know is covered by tests/core/figures/test_knee_explain.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.app.session import serving_sim, sim_serve_text
from rampwatch.sim.config import SimConfig

pytestmark = pytest.mark.slow  # starts a process or a Textual app (tests/tiers.py)

REPO = Path(__file__).resolve().parents[3]


def rampwatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def headless_ramp(server: list[str], tmp_path: Path, duration_s: int) -> tuple[str, dict]:
    result_json = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            "random",
            "--headless",
            *server,
            "--record",
            str(tmp_path / "run.rwrec"),
            "--result-json",
            str(result_json),
            "--duration",
            str(duration_s),
            "--start-rps",
            "4",
            "--end-rps",
            "30",
            "--set",
            "workload.input_tokens=100",
            "--set",
            "workload.output_tokens=60",
            "--set",
            "schedule.arrival=constant",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(result_json.read_text())["rampwatch_knee_explanation"]


@pytest.mark.parametrize(
    ("config", "started", "duration_s", "limit", "evidence", "try_next"),
    [
        # 8 running at most, plenty of KV: requests queue with the cache nearly empty;
        # rampwatch started the server, so it knows the cap from the command
        ({"max_num_seqs": 8}, True, 12, "batch_cap", "running 8 = max_num_seqs 8", "--max-num-seqs 16"),
        # 96 blocks of 16 tokens: ~9 requests of 160 tokens fill the cache; a server
        # rampwatch only connects to: the KV size comes from its vllm:cache_config_info.
        # A longer ramp: on a loaded machine 12 s once ended with KV at 99 % and no knee
        # declared yet (it needs 5 s of two signals together).
        ({"num_gpu_blocks": 96}, False, 20, "kv_full", "preemptions", "--kv-cache-dtype fp8"),
    ],
    ids=["batch-cap", "kv-full"],
)
def test_a_headless_run_names_the_limit_behind_its_knee(
    tmp_path, config, started, duration_s, limit, evidence, try_next
):
    sim_config = SimConfig(hardware="l4", model="llama-3.1-8b", speed=6.0, **config)
    if started:
        out, why = headless_ramp(["--serve", sim_serve_text(sim_config)], tmp_path, duration_s)
    else:
        with serving_sim(sim_config) as sim:
            out, why = headless_ramp(["--target", sim.url], tmp_path, duration_s)
    assert why is not None, out
    assert why["limit"] == limit, why
    assert evidence in why["evidence"], why
    assert why["try"] == try_next
    # the settled explanation: judged with the seconds after the knee too (the run's end
    # settles it when the ramp ends sooner than the review's 30 s)
    assert re.fullmatch(r"\d+ s before the knee, [1-9]\d* s after", why["window"]), why
    lines = out.splitlines()
    knee = next(i for i, line in enumerate(lines) if line.startswith("Knee at offered rate"))
    assert lines[knee + 1].startswith(f"  why: {why['title']} (")
    assert lines[knee + 1].endswith(f"→ try {try_next}")
    assert lines[knee + 2].startswith(f"  judged on the {why['window']}")

    # the recording carries it: the report, the HTML and JSON exports say the same
    report = rampwatch("report", str(tmp_path / "run.rwrec"))
    assert report.returncode == 0, report.stderr
    assert lines[knee + 1] in report.stdout.splitlines()
    exported = rampwatch("export", str(tmp_path / "run.rwrec"), "--format", "html", "-o", str(tmp_path / "r.html"))
    assert exported.returncode == 0, exported.stderr
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Knee</h2>" in page and f"<b>{why['title']}</b>" in page
    assert f"<li>try next: {try_next}</li>" in page
