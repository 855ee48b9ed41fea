"""The acceptance the figures show against the simulator's configured rates, within their
sampling error: a headless run against a simulator drafting 3 tokens a request, each
position accepted (given the ones before it were) with a configured conditional rate.

Every draft holds exactly k = 3 tokens (the simulator, as vLLM, cuts a draft only at the
step's token budget and max_model_len, far away here), and the drafts are independent
draws, so over the D drafts the run's scrapes counted:

- position i's acceptance (accepted at i / drafts) is a Bernoulli mean of
  u_i = c_0 ... c_i, standard error sqrt(u_i (1 - u_i) / D);
- the acceptance rate (accepted / drafted tokens) is the mean of A / k, A the accepted
  drafts of one draft: E[A] = sum u_i, Var[A] = sum (2i + 1) u_i - E[A]^2, standard error
  sqrt(Var[A] / D) / k; the mean acceptance length is 1 + that mean times k.

Each figure must lie within ``SIGMAS`` standard errors of its expectation (a false
failure about once in 16,000 runs per figure)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import free_port

pytestmark = pytest.mark.slow  # starts a process (tests/tiers.py)

REPO = Path(__file__).resolve().parents[3]
CONDITIONAL = (0.8, 0.6, 0.5)
SIGMAS = 4.0


def expected() -> tuple[list[float], float, float]:
    """(u_i, E[A], Var[A]) of the configured conditional rates."""
    u, p = [], 1.0
    for c in CONDITIONAL:
        p *= c
        u.append(p)
    mean = sum(u)
    second = sum((2 * i + 1) * ui for i, ui in enumerate(u))  # E[A^2] = sum over j>=1 of (2j-1) P(A>=j)
    return u, mean, second - mean**2


def test_the_acceptance_shown_is_the_configured_rate_within_its_sampling_error(tmp_path):
    spec = json.dumps({"method": "eagle", "num_speculative_tokens": 3, "acceptance": list(CONDITIONAL)})
    serve = f"rampwatch sim --hardware h100 --model llama-3.1-8b --speed 4 --port {free_port()} --speculative-config '{spec}'"
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", "chat", "--headless", "--serve", serve,
         "--record", str(tmp_path / "run.rwrec"), "--result-json", str(result),
         "--duration", "8", "--start-rps", "4", "--end-rps", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(result.read_text())["rampwatch_spec_decode"]
    k = len(CONDITIONAL)
    drafts = figures["drafts"]
    assert drafts > 1000 and figures["draft_tokens"] == k * drafts
    u, mean, variance = expected()
    rate_se = math.sqrt(variance / drafts) / k
    assert abs(figures["acceptance_rate_pct"] / 100 - mean / k) <= SIGMAS * rate_se, (figures, mean / k, rate_se)
    assert abs(figures["mean_acceptance_length"] - (1 + mean)) <= SIGMAS * rate_se * k
    for shown, ui in zip(figures["per_position_acceptance_pct"], u, strict=True):
        assert abs(shown / 100 - ui) <= SIGMAS * math.sqrt(ui * (1 - ui) / drafts), (shown, ui)
    # the summary's text says the same, and the recording replays to it
    assert f"{figures['acceptance_rate_pct']:.1f}" in proc.stdout.split("Draft acceptance rate (%):")[1].split("\n")[0]
    report = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "report", "--json", str(tmp_path / "run.rwrec")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    replayed = json.loads(report.stdout)
    assert replayed["server"]["speculation"] == figures
    assert all(step["spec_acceptance_pct"] is not None for step in replayed["steps"][1:-1])
