"""The embedded simulator serves what a scenario's requests need of it: a reasoning
parser for reasoning fields, the image model for images (unless --sim-model names one),
the adapters; the run's --sim-model resolved for the header; nothing added otherwise."""

import json
import subprocess
import sys

import pytest

from rampwatch.app.run_config import DEFAULT_SIM_MODEL, RunConfig
from rampwatch.app.session.embedded_sim import (
    IMAGE_SIM_MODEL,
    REASONING_PARSER,
    embedded_sim_model,
    sim_choice,
)
from rampwatch.app.session.plan import plan_run
from rampwatch.app.session.server import serve_command
from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.record.reader import open_recording
from tests.processes import free_port

IMAGES = {"count": 1, "width": 64, "height": 64}
PLAIN = {"input_tokens": 10, "output_tokens": 10}


def words(config: RunConfig, workload: dict) -> list[str]:
    command = serve_command(config, seed=0, workload=workload)
    assert command is not None
    return list(command.argv)


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_plain_workload_gets_the_default_simulator_and_no_note():
    choice = sim_choice(PLAIN, None)
    assert (choice.model, choice.reasoning, choice.lora.enable_lora, choice.notes) == (
        DEFAULT_SIM_MODEL,
        None,
        False,
        (),
    )
    argv = words(RunConfig("random"), PLAIN)
    assert flag(argv, "--model") == DEFAULT_SIM_MODEL and "--reasoning-parser" not in argv


@pytest.mark.parametrize(
    "workload",
    [
        {**PLAIN, "reasoning_effort": "low"},
        {**PLAIN, "chat_template_kwargs": {"enable_thinking": False}},
        {"mix": [{"name": "a", **PLAIN}, {"name": "b", **PLAIN, "reasoning_effort": "high"}]},
    ],
    ids=["effort", "template-kwargs", "one-class-of-a-mix"],
)
def test_reasoning_fields_start_a_reasoning_simulator(workload):
    argv = words(RunConfig("chat"), workload)
    assert flag(argv, "--reasoning-parser") == REASONING_PARSER
    assert any("--reasoning-parser" in note for note in sim_choice(workload, None).notes)


@pytest.mark.parametrize(
    "workload",
    [{**PLAIN, "images": IMAGES}, {"mix": [{"name": "a", **PLAIN}, {"name": "v", **PLAIN, "images": IMAGES}]}],
)
def test_images_start_the_image_model_unless_sim_model_is_given(workload):
    assert flag(words(RunConfig("chat"), workload), "--model") == IMAGE_SIM_MODEL
    assert sim_choice(workload, None).notes == (f"--model {IMAGE_SIM_MODEL} (the scenario sends images)",)
    # named: kept, and nothing to say
    assert flag(words(RunConfig("chat", sim_model=IMAGE_SIM_MODEL), workload), "--model") == IMAGE_SIM_MODEL
    assert sim_choice(workload, IMAGE_SIM_MODEL).notes == ()


def test_a_sim_model_that_takes_no_images_is_one_line_naming_the_fix():
    with pytest.raises(UserError) as caught:
        serve_command(RunConfig("chat", sim_model="llama-3.1-8b"), seed=0, workload={**PLAIN, "images": IMAGES})
    text = str(caught.value)
    assert "\n" not in text and text.startswith("--sim-model llama-3.1-8b: takes no images")
    assert f"--sim-model {IMAGE_SIM_MODEL}" in text and "workload.images" in text


def test_a_target_or_serve_run_gets_nothing_of_it():
    workload = {**PLAIN, "images": IMAGES, "reasoning_effort": "low"}
    assert serve_command(RunConfig("chat", target="http://127.0.0.1:9"), seed=0, workload=workload) is None
    served = serve_command(RunConfig("chat", serve="rampwatch sim --port 8123"), seed=0, workload=workload)
    assert served is not None and "--reasoning-parser" not in served.argv
    # the header's --sim-model stays the default preset for a run that does not start the simulator
    assert embedded_sim_model(RunConfig("chat", target="http://127.0.0.1:9"), workload) == DEFAULT_SIM_MODEL
    assert embedded_sim_model(RunConfig("chat"), workload) == IMAGE_SIM_MODEL
    assert embedded_sim_model(RunConfig("chat", sim_model="tiny"), workload) == "tiny"


@pytest.mark.parametrize(
    "scenario, model, notes",
    [
        ("chat", DEFAULT_SIM_MODEL, ()),
        ("images", IMAGE_SIM_MODEL, ("--model qwen2-vl-7b",)),
        ("reasoning", DEFAULT_SIM_MODEL, ("--reasoning-parser deepseek_r1",)),
        ("lora", DEFAULT_SIM_MODEL, ("--enable-lora --max-loras 1 and its 3 adapters",)),
    ],
)
def test_the_plan_of_a_shipped_scenario_resolves_the_model_and_says_what_it_added(scenario, model, notes):
    plan = plan_run(RunConfig(scenario, no_record=True), claim=False)
    assert plan.config.sim_model == model  # what the recording's header keeps
    assert plan.config.recorded_options()["sim_model"] == model
    assert len(plan.sim_notes) == len(notes) and all(n.startswith(w) for n, w in zip(plan.sim_notes, notes))
    assert plan.server is not None and flag(list(plan.server.command.argv), "--model") == model
    load_scenario(scenario)  # the shipped file is valid


# The shipped scenarios of issue 28, run as the docs show them (docs/scenarios.md): headless
# on the embedded simulator (an H100: seconds), each summary with its feature's section.


def run_headless(tmp_path, scenario: str, *extra: str) -> tuple[str, dict]:
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rampwatch.app.cli",
            "run",
            scenario,
            "--headless",
            "--record",
            str(tmp_path / "r.rwrec"),
        ]
        + ["--duration", "4", "--progress-interval", "100", "--result-json", str(result), *extra],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, json.loads(result.read_text())


def section(out: str, title: str) -> dict[str, str]:
    """A summary section's rows, label → value, from its ``--- title ---`` line to the next."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-") and line.strip("-= ") == title)
    rows = {}
    for line in lines[start + 1 :]:
        if line.startswith(("-", "=")):
            break
        label, _, value = line.partition(":")
        rows[label.strip()] = value.strip()
    return rows


@pytest.mark.slow
def test_the_reasoning_scenario_runs_on_a_reasoning_simulator(tmp_path):
    out, result = run_headless(tmp_path, "reasoning", "--sim-hardware", "h100")
    assert out.splitlines()[0].startswith("embedded simulator: --reasoning-parser deepseek_r1")
    rows = section(out, "Time to First Answer (reasoning)")
    assert int(rows["Requests that reasoned"]) > 0 and rows["Reasoning tokens from"] == "usage"
    assert float(rows["Mean TTFA (ms)"]) > result["mean_ttft_ms"]  # the thinking comes first
    classes = out[out.index("Classes (") :].splitlines()
    assert classes[1].split() == ["minimal", "low", "no-think"]
    assert any(line.startswith("TTFA p50 ms") for line in classes)


@pytest.mark.slow
def test_the_lora_scenario_runs_on_a_simulator_serving_its_adapters(tmp_path):
    out, result = run_headless(tmp_path, "lora", "--sim-hardware", "h100")
    note = "embedded simulator: --enable-lora --max-loras 1 and its 3 adapters"
    assert out.splitlines()[0] == note
    with open_recording(tmp_path / "r.rwrec") as recording:  # the live screen's Events panel shows it
        assert [(e.kind, e.message) for e in recording.events if e.data.get("server")] == [("info", note)]
    assert "LoRA max_lora (--max-loras):             1" in out
    adapters = out[out.index("Adapters (") :].splitlines()
    assert adapters[1].split() == ["sql", "support", "summarize"]
    assert list(result["rampwatch_per_adapter"]) == ["sql", "support", "summarize"]


@pytest.mark.slow
def test_the_images_scenario_runs_on_the_image_model(tmp_path):
    out, result = run_headless(tmp_path, "images", "--sim-hardware", "h100")
    assert out.splitlines()[0] == f"embedded simulator: --model {IMAGE_SIM_MODEL} (the scenario sends images)"
    rows = section(out, "Images")
    assert 1.0 <= float(rows["Images per request (mean)"]) <= 2.0 and rows["Images per request (max)"] in ("1", "2")
    assert "MM cache hit rate (%)" in rows
    # the prompts hold the image tokens the simulator charged: at least 326 (a 512×512 image) each
    assert result["total_input_tokens"] / result["completed"] > 326


@pytest.mark.slow
def test_the_documented_speculation_line_shows_its_acceptance(tmp_path):
    port = free_port()
    spec = '{"method": "ngram", "num_speculative_tokens": 3}'
    serve = f"rampwatch sim --hardware h100 --port {port} --speculative-config '{spec}'"
    out, result = run_headless(tmp_path, "chat", "--serve", serve)
    rows = section(out, "Speculative decoding")
    assert rows["Drafted tokens per draft"] == "3.00"
    # ngram's preset at k = 3: 1 + 0.45 + 0.45·0.35 + 0.45·0.35·0.30 = 1.65 (docs/sim-presets.md)
    assert float(rows["Mean acceptance length"]) == pytest.approx(1.65, abs=0.08)
    assert result["rampwatch_spec_decode"]["mean_acceptance_length"] == pytest.approx(1.65, abs=0.08)
