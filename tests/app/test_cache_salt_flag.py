"""A run's cache salt (--cache-salt): every request of the run carries it, so a repeat run
against the same server does not read the earlier run's prompts from its prefix cache."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.core.cache_salt import cache_salt_choice
from rampwatch.core.errors import UserError
from rampwatch.loadgen.run.options import RunOptions
from rampwatch.loadgen.run.runner import Run
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.sim.config import SimConfig
from rampwatch.sim.server import serve

REPO = Path(__file__).resolve().parents[2]

REPEATED = """endpoint: completions
seed: 3
schedule: {kind: constant, rate: 50, num_requests: 24}
workload:
  system_prompt: {tokens: 64}
  input_tokens: 192
  output_tokens: 2
"""
MIXTURE = """seed: 3
schedule: {kind: constant, rate: 50, num_requests: 8}
workload:
  mix:
    - {name: short, weight: 1, input_tokens: 16, output_tokens: 2}
    - {name: long, weight: 1, system_prompt: {tokens: 32}, input_tokens: 64, output_tokens: 2}
"""


def scenario_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


def prefix_hit_pct(records) -> float:
    prompt = sum(r.prompt_tokens for r in records)
    return 100.0 * sum(r.cached_tokens for r in records) / prompt


async def run_once(url: str, scenario, choice: str) -> float:
    policy, salt = cache_salt_choice(choice)
    options = RunOptions(
        target=url, model="tiny", keep_records=True, cache_salt_policy=policy, cache_salt=salt, tick_interval_s=0.05
    )
    result = await asyncio.wait_for(Run(scenario, options).execute(), 30)
    assert all(r.ok for r in result.requests) and len(result.requests) == 24
    return prefix_hit_pct(result.requests)


@pytest.mark.slow
@pytest.mark.parametrize(
    "choice, warm",
    [
        ("auto", False),  # the default: a fresh salt per run, the second run starts as cold as the first
        ("run-salt", True),  # the same salt on purpose: the second run reads the first's prompts
        ("none", True),  # no salt: the same
    ],
)
async def test_a_repeat_run_sees_the_cache_the_first_run_saw_unless_told_to_share(tmp_path, choice, warm):
    scenario = load_scenario(scenario_file(tmp_path, REPEATED))
    config = SimConfig(hardware="instant", model="tiny", enable_prompt_tokens_details=True)
    async with serve(config) as url:  # one server for both runs, as a user's --target is
        first = await run_once(url, scenario, choice)
        second = await run_once(url, scenario, choice)
    # Within a run the declared shared prefix (the 64-token system prompt) is hit: the
    # salt isolates runs, not the requests of one run.
    assert 15.0 < first < 30.0
    if warm:
        assert second > 90.0  # every prompt but its last partial block, from the first run
    else:
        assert abs(second - first) < 3.0


@pytest.mark.parametrize("text", [REPEATED, MIXTURE], ids=["plain", "mixture"])
def test_every_request_carries_the_runs_salt_and_none_without_one(tmp_path, text):
    scenario = load_scenario(scenario_file(tmp_path, text))
    salted = RequestFactory(scenario, cache_salt="rampwatch-0123")
    plain = RequestFactory(scenario)
    for _ in range(8):
        a, b = salted.next_request(), plain.next_request()
        assert a.payload.pop("cache_salt") == "rampwatch-0123"
        assert "cache_salt" not in b.payload
        assert a.payload == b.payload  # the salt changes nothing else: same prompts, same lengths


def test_a_scenario_cannot_set_the_salt_its_runs_get_from_the_flag(tmp_path):
    text = REPEATED + "  extra_body: {temperature: 0, cache_salt: mine}\n"
    with pytest.raises(UserError) as err:
        load_scenario(scenario_file(tmp_path, text))
    assert ":8: workload.extra_body.cache_salt" in str(err.value) and "--cache-salt" in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize("value", ["", "team/a", "x" * 129])
def test_a_bad_cache_salt_flag_is_one_line_before_anything_starts(tmp_path, value):
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", "random", "--headless", "--cache-salt", value],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "server:" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"rampwatch run: error: --cache-salt '{value[:40]}") and ": expected auto" in last
