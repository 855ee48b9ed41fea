"""The speculative-decoding knee rule end to end, on a simulator set up so that the right
answer is known: H100, Llama-3.1-8B, at most 64 running, n-gram speculation drafting 7
tokens a request (its preset accepts ~0.7 of them a step). At a few running requests the
step is bound by reading the weights and speculation pays (a token every ~4 ms against a
~6 ms step); at 64 each step verifies 512 tokens, it is compute bound, and a token costs
more than a step without speculation would (the simulator's TPOT there: ~14.5 ms with it,
~11 ms without). The same ramp without speculation has a knee at the batch cap."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import free_port

pytestmark = pytest.mark.slow  # starts a process (tests/tiers.py)

REPO = Path(__file__).resolve().parents[3]
SIM = "rampwatch sim --hardware h100 --model llama-3.1-8b --max-num-seqs 64"
NGRAM = """ --speculative-config '{"method": "ngram", "num_speculative_tokens": 7}'"""


@pytest.mark.parametrize(
    ("spec", "limit", "try_next"),
    [
        (True, "spec_decode", '"num_speculative_tokens_per_batch_size": [[1, '),
        (False, "batch_cap", "--max-num-seqs 128"),
    ],
    ids=["speculating", "plain"],
)
def test_the_knee_of_a_speculating_server_says_to_turn_speculation_off_above_a_batch(tmp_path, spec, limit, try_next):
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            "random",
            "--headless",
            "--serve",
            f"{SIM} --port {free_port()}" + (NGRAM if spec else ""),
            "--no-record",
            "--result-json",
            str(result),
            "--duration",
            "30",
            "--start-rps",
            "1",
            "--end-rps",
            "24",
            "--set",
            "workload.input_tokens=100",
            "--set",
            "workload.output_tokens=400",
            "--set",
            "schedule.arrival=constant",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(result.read_text())
    why = data["rampwatch_knee_explanation"]
    assert why is not None, proc.stdout
    assert why["limit"] == limit, why
    assert why["try"].startswith(try_next), why
    if spec:
        assert "of 7 drafted" in why["evidence"] and "rejected drafts" in why["evidence"]
        assert why["try"].endswith(
            "64, 0]] in --speculative-config (speculation off above "
            + why["try"].split("[[1, ")[1].split(",")[0]
            + " running)"
        )
        assert data["rampwatch_spec_decode"]["draft_tokens_per_draft"] == pytest.approx(7.0, abs=0.1)
    else:
        assert "rampwatch_spec_decode" not in data and "speculation" not in data["rampwatch_server"]
