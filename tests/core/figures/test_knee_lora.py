"""The lora_slots knee rule: adapters waiting for a slot at --max-loras around the knee."""

import math

import pytest

from rampwatch.core.figures.knee_explain import explain_knee
from rampwatch.core.figures.knee_lora import lora_slots
from rampwatch.core.figures.knee_window import KneeWindow
from rampwatch.core.figures.server_limits import ServerLimits


def window(running, waiting, max_lora, n=20, queue=None):
    return {
        "lora_running": [float(running)] * n,
        "lora_waiting": [float(waiting)] * n,
        "max_lora": [float(max_lora)] * n,
        "waiting": queue if queue is not None else [float(i) for i in range(n)],
        "running": [4.0] * n,
    }


def test_adapters_waiting_at_max_loras_name_the_flag_with_evidence():
    found = explain_knee(window(running=2, waiting=3, max_lora=2), ServerLimits())
    assert found.limit == "lora_slots"
    assert found.try_next == "--max-loras 4"  # 5 wanted at once, at most twice the 2 slots
    assert "adapters waited for a slot in 10 of 10 s" in found.evidence
    assert "running adapters at --max-loras 2 in 10 of them" in found.evidence
    assert "up to 5 distinct adapters wanted at once" in found.evidence
    assert "requests waiting 0→19" in found.evidence.replace(" ", " ")


def test_raised_to_what_is_wanted_when_that_is_under_twice():
    found = lora_slots(KneeWindow(window(running=4, waiting=1, max_lora=4)), ServerLimits())
    assert found is not None and found.try_next == "--max-loras 5"


def test_no_adapter_waiting_or_slots_free_or_no_lora_figures_is_not_this_limit():
    assert lora_slots(KneeWindow(window(running=2, waiting=0, max_lora=2)), ServerLimits()) is None
    assert lora_slots(KneeWindow(window(running=1, waiting=2, max_lora=4)), ServerLimits()) is None
    plain = {k: v for k, v in window(2, 3, 2).items() if not k.startswith(("lora", "max_lora"))}
    assert lora_slots(KneeWindow(plain), ServerLimits()) is None
    gaps = window(2, 3, 2)
    gaps["max_lora"] = [math.nan] * 18 + [2.0, 2.0]  # two seconds with figures: too few to say
    assert lora_slots(KneeWindow(gaps), ServerLimits()) is None


def test_at_a_known_batch_cap_the_batch_cap_binds_first():
    from rampwatch.core.figures import knee_lora, knee_rules

    assert knee_lora.CAP_FRACTION == knee_rules.CAP_FRACTION
    at_cap = window(running=2, waiting=3, max_lora=2)
    limits = ServerLimits(max_num_seqs=4)
    assert lora_slots(KneeWindow(at_cap), limits) is None
    assert explain_knee(at_cap, limits).limit == "batch_cap"


@pytest.mark.slow
def test_a_headless_run_against_a_simulator_with_one_slot_names_the_lora_slots(tmp_path):
    """A known case end to end: three adapters, one slot (vLLM's default --max-loras 1) on
    a simulated L4 at 6x: the knee is the slots, and the advice the next slot count."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from rampwatch.app.session import sim_serve_text
    from rampwatch.sim.config import SimConfig
    from rampwatch.sim.lora import LoraConfig, LoraModule

    names = ("sql", "chat", "code")
    lora = LoraConfig(enable_lora=True, modules=tuple(LoraModule(n, f"/{n}") for n in names), max_loras=1)
    sim = SimConfig(hardware="l4", model="llama-3.1-8b", speed=6.0, lora=lora)
    scenario = tmp_path / "lora.yaml"
    scenario.write_text(
        "name: lora-knee\nseed: 1\n"
        "schedule: {kind: linear, start_rps: 2, end_rps: 30, duration_s: 12, arrival: constant}\n"
        "workload:\n  input_tokens: 100\n  output_tokens: 60\n"
        "  adapters: [{name: sql, weight: 3}, {name: chat, weight: 1}, {name: code, weight: 1}]\n"
    )
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", str(scenario), "--headless", "--no-record"]
        + ["--serve", sim_serve_text(sim), "--result-json", str(result)],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    why = json.loads(result.read_text())["rampwatch_knee_explanation"]
    assert why is not None and why["limit"] == "lora_slots", why
    assert "running adapters at --max-loras 1" in why["evidence"], why
    assert why["try"] == "--max-loras 2"
