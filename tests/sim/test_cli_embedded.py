"""`rampwatch sim` as a process, alone and as `rampwatch run`'s embedded simulator."""

import argparse
import json
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from rampwatch.app.cli import main as rampwatch_main
from rampwatch.app.session import serving_sim, sim_serve_text
from rampwatch.core.errors import UserError
from rampwatch.sim.cli import config_from_args, config_to_argv, configure
from rampwatch.sim.config import FaultConfig, SimConfig

ROOT = Path(__file__).resolve().parents[2]


def start_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rampwatch.app.cli", "sim", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_cli_serves_prints_banner_and_stops_cleanly_on_sigterm():
    proc = start_cli("--hardware", "instant", "--model", "tiny", "--port", "0", "--served-model-name", "demo")
    try:
        line = proc.stdout.readline()
        assert line.startswith("rampwatch sim: serving demo on http://127.0.0.1:")
        assert "(hardware instant, " in line and " KV blocks)" in line
        url = line.split(" on ")[1].split(" ")[0]
        assert not url.endswith(":0")
        body = json.dumps({"model": "demo", "prompt": "hi", "max_tokens": 3, "stream": True}).encode()
        with urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", data=body), timeout=10) as r:
            assert r.read().endswith(b"data: [DONE]\n\n")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_cli_sigint_exits_zero():
    proc = start_cli("--hardware", "instant", "--model", "tiny", "--port", "0")
    try:
        assert "serving" in proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0 and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--hardware", "b200"], "--hardware 'b200': unknown hardware preset; valid values: a100-40g"),
        (["--model", "gpt"], "--model 'gpt'"),
        (["--max-num-seqs", "0"], "--max-num-seqs 0"),
    ],
)
def test_bad_flags_are_user_errors(capsys, args, expected):
    assert rampwatch_main(["sim", *args, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rampwatch sim: error: ") and expected in err


@pytest.mark.slow
def test_the_embedded_simulator_is_a_managed_server_that_stops_cleanly():
    """`rampwatch run`'s default server: `rampwatch sim` under the same guard as any
    --serve command (tests/loadgen/server/test_managed.py covers the guard's stop paths)."""
    with serving_sim(SimConfig(hardware="instant", model="tiny")) as sim:
        assert sim.url.startswith("http://127.0.0.1:") and sim.pid > 0
        assert sim.command.argv[:5] == (sys.executable, "-P", "-m", "rampwatch.app.cli", "sim")
        with urllib.request.urlopen(sim.url + "/v1/models", timeout=5) as r:
            assert json.loads(r.read())["data"][0]["id"] == "tiny"
    assert sim.poll() == 0  # SIGTERM: a clean exit


def test_the_embedded_simulator_reports_per_request_cache_hits():
    # rampwatch records usage.prompt_tokens_details.cached_tokens per request (hit rate
    # by turn); the simulator it starts says it, as vLLM does with the flag.
    argv = shlex.split(sim_serve_text(SimConfig(hardware="instant", model="tiny"), port=1))
    assert "--enable-prompt-tokens-details" in argv


def test_embedded_sim_rejects_bad_preset_before_starting():
    with pytest.raises(UserError, match="--hardware"):
        sim_serve_text(SimConfig(hardware="nope"))


def test_config_to_argv_round_trips_through_the_cli_flags():
    config = SimConfig(
        hardware="l4",
        model="tiny",
        seed=7,
        max_num_seqs=12,
        enable_prefix_caching=False,
        served_model_name="demo",
        enable_prompt_tokens_details=True,
        limit_mm_images=3,
        mm_processor_cache_gb=0.5,
        faults=FaultConfig(error_rate=0.1, stall_at=3.0, stall_for=1.0),
    )
    parser = argparse.ArgumentParser()
    configure(parser)
    assert config_from_args(parser.parse_args(config_to_argv(config))) == config.resolved()
