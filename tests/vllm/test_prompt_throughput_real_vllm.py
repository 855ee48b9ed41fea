"""rampwatch's "Avg prompt throughput" means what vLLM's own log line of that name means:
the prompt tokens the server computed, prefix-cache hits excluded. A steady load whose
prompts share a long system prompt runs against the real vLLM CPU server; rampwatch's
figure must match the log lines vLLM printed over the same stretch, and its "incl. cache
hits" figure must stand well above it (a figure of all prompt tokens under vLLM's label
would fail here)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# 35 s: from 5 s in to the end, 20 s or more hold two of vLLM's 10 s log intervals whole.
DURATION_S = 35
LOG_INTERVAL_S = 10  # vLLM's VLLM_LOG_STATS_INTERVAL default
# "INFO 11-23 11:37:45 [loggers.py:335] Engine 000: Avg prompt throughput: 42.0 tokens/s, ..."
LOG_LINE = re.compile(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[loggers\.py:\d+\].*Avg prompt throughput: ([\d.]+) tokens/s")


def summary_figure(stdout: str, label: str) -> float:
    match = re.search(re.escape(label) + r"\s+([\d.]+)", stdout)
    assert match, f"no {label!r} in the summary:\n{stdout[-3000:]}"
    return float(match.group(1))


def logged_prompt_throughput(log: str, start: float, end: float) -> list[float]:
    """vLLM's logged figures whose whole interval lies inside [start, end] (wall clock)."""
    year = datetime.now().year
    out = []
    for stamp, value in LOG_LINE.findall(log):
        at = datetime.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S").timestamp()
        # stamps are whole seconds: the interval (at - 10, at] is inside when its bounds are
        if at - LOG_INTERVAL_S - 1 >= start and at <= end:
            out.append(float(value))
    return out


def test_avg_prompt_throughput_is_vllms_own(vllm_server, tmp_path):
    sets = {
        "schedule": f"{{kind: constant, rate: 4, duration_s: {DURATION_S}}}",
        "workload.documents": "null",
        "workload.conversations": "null",
        "workload.system_prompt.tokens": "600",
        "workload.input_tokens": "{dist: uniform, min: 30, max: 100}",
        "workload.output_tokens": "{dist: uniform, min: 16, max: 32}",
    }
    log_before = vllm_server.log_path.read_text(errors="replace")
    start = time.time()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            "prefix-heavy",
            "--headless",
            "--target",
            vllm_server.url,
            "--tokenizer",
            str(vllm_server.paths.model),
            "--no-record",
            "--max-error-rate",
            "0",
            *[arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")],
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=DURATION_S + 90,
    )
    end = time.time()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    computed = summary_figure(proc.stdout, "Avg prompt throughput (tok/s):")
    all_prompt = summary_figure(proc.stdout, "Prompt incl. cache hits (tok/s):")

    new_log = Path(vllm_server.log_path).read_text(errors="replace")[len(log_before) :]
    logged = logged_prompt_throughput(new_log, start + 5, end)  # past the first requests' cold cache
    # At 4 req/s no 10 s interval of the load is without a prompt: a 0 tok/s line is one
    # before the first request, which a busy machine's start-up (imports, the model
    # check) pushed past the 5 s allowed for it.
    logged = [value for value in logged if value > 0]
    assert len(logged) >= 2, f"too few vLLM log lines inside the run:\n{new_log[-3000:]}"
    vllm_figure = sum(logged) / len(logged)
    assert computed == pytest.approx(vllm_figure, rel=0.25), (computed, logged)
    assert all_prompt > 2 * computed  # 600 shared tokens of ~665: most prompt tokens are cache hits
