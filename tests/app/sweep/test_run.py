"""The headless sweep in this process: a signal between two loads, a repeat's seed, and a
configuration's run configuration.
Nothing here starts a server (tests/app/sweep/test_cli.py runs whole sweeps)."""

import argparse
import io
import json
import shlex
import signal

from rampwatch.app.run_config import RunConfig
from rampwatch.app.sweep import cli as sweep_cli
from rampwatch.app.sweep.run import Sweep, repeat_scenario
from rampwatch.loadgen.workload.scenario import load_scenario
from tests.app.sweep.sweep_files import GOOD_SWEEP, sweep_file


def test_a_signal_landing_as_the_start_line_is_written_interrupts_that_configuration(tmp_path, monkeypatch):
    """The signal handler raises KeyboardInterrupt wherever the sweep is between loads:
    landing just after the "[1/2] start" line was flushed, the configuration it announced
    is the one interrupted (it stayed "pending" when the line was written outside it)."""
    parser = argparse.ArgumentParser()
    sweep_cli.configure(parser)
    path = sweep_file(tmp_path, "[{max-num-seqs: 2}, {max-num-seqs: 32}]")
    sweep = Sweep(parser.parse_args([str(path), "--headless"]), out=io.StringIO())
    sweep.prepare()
    say = sweep.say

    def say_then_signal(text: str) -> None:
        say(text)
        if " start: " in text:
            raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "say", say_then_signal)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        code = sweep.execute()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert code == 130
    state = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert [r["status"] for r in state["rows"]] == ["interrupted", "pending"]


def test_a_repeat_moves_the_seed_on_so_its_arrivals_differ():
    first = load_scenario("chat")
    second = repeat_scenario(first, 1)
    assert second.seed == first.seed + 1 and second.raw["seed"] == second.seed
    assert first.raw["seed"] == first.seed  # the first run's scenario is left as it was
    gaps = [[s.next_send_time() for _ in range(20)] for s in (first.build_schedule(), second.build_schedule())]
    assert gaps[0] != gaps[1]


def test_a_configurations_run_configuration_is_rampwatch_run_serves_with_the_sweeps_flags(tmp_path):
    """Built directly, not written as flags and parsed again: it is what `rampwatch run`'s
    parser gives for the same words (the run's defaults, the stop grace a float, the
    simulator's GPU gauges read)."""
    parser = argparse.ArgumentParser()
    sweep_cli.configure(parser)
    path = sweep_file(tmp_path, "[{max-num-seqs: 2}]")
    sweep = Sweep(parser.parse_args([str(path), "--headless", "--api-key", "sk-sweep-1"]), out=io.StringIO())
    serve = sweep.spec.serve + " --max-num-seqs 2"
    recording = tmp_path / "out" / "c1.rwrec"
    config = sweep.run_config(serve, recording)

    port = shlex.split(serve)[shlex.split(serve).index("--port") + 1]
    run_parser = argparse.ArgumentParser()
    RunConfig.add_cli_args(run_parser)
    words = ["chat", "--headless", "--serve", serve, "--record", str(recording), "--stop-grace", "1"]
    words += ["--set", 'workload.output_tokens={"dist": "uniform", "min": 10, "max": 30}']
    words += ["--set", "schedule=" + json.dumps(sweep.spec.schedule), "--api-key", "sk-sweep-1"]
    words += ["--gpu-metrics-url", f"http://127.0.0.1:{port}/dcgm/metrics"]
    assert config == RunConfig.from_cli_args(run_parser.parse_args(words))
    assert isinstance(config.stop_grace, float) and config.recorded_options()["stop_grace"] == 1.0


def test_the_headline_masks_an_api_key_in_the_serve_command(tmp_path, monkeypatch):
    """The first line a sweep prints names its serve command: with secrets masked, as
    sweep.json keeps it (it printed `--api-key KEY` as typed)."""
    path = tmp_path / "s.yaml"
    path.write_text(GOOD_SWEEP.replace("--port 8311", "--port 8311 --api-key SWEEPSECRET999"))
    parser = argparse.ArgumentParser()
    sweep_cli.configure(parser)
    out = io.StringIO()
    sweep = Sweep(parser.parse_args([str(path), "--headless", "--output-dir", str(tmp_path / "out")]), out=out)
    sweep.prepare()
    monkeypatch.setattr(sweep, "_one", lambda row, label: None)  # no server, no load
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        sweep.execute()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    printed = out.getvalue()
    assert "configurations of vllm serve Qwen/Qwen2.5-0.5B --port 8311 --api-key" in printed
    assert "SWEEPSECRET999" not in printed
    assert "SWEEPSECRET999" not in (tmp_path / "out" / "sweep.json").read_text()
