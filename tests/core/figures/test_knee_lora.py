"""The lora_slots knee rule: adapters waiting for a slot at --max-loras around the knee."""

import math

import numpy as np
import pytest

from rampwatch.core.figures.knee_explain import explain_knee
from rampwatch.core.figures.knee_lora import lora_slots, waiting_while_adapters_waited
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
    # the recent seconds the rule read (the last 10 before the knee), not the window's ends
    assert "requests waiting 10→19" in found.evidence.replace(" ", " ")


def test_the_queue_is_said_over_the_seconds_adapters_waited_not_the_windows_ends():
    """The reported case: a linear ramp against one slot and three adapters, reviewed to
    the run's end. The window's first second is before the queue, its last after the
    drain: the evidence said "requests waiting 0→0" of a queue that peaked at 89."""
    before = window(running=1, waiting=0, max_lora=1, n=45, queue=[0.0] * 45)
    before["lora_waiting"] = [0.0] * 35 + [2.0] * 10  # adapters wait from 10 s before the knee
    before["waiting"] = [0.0] * 35 + [float(q) for q in range(12, 52, 4)]  # 12 … 48
    after = {
        "lora_running": [1.0] * 15 + [0.0] * 10,
        "lora_waiting": [2.0] * 15 + [0.0] * 10,  # drained: none waits
        "max_lora": [1.0] * 25,
        "waiting": [float(q) for q in (52, 60, 70, 80, 89, 85, 80, 70, 60, 50, 40, 30, 20, 10, 5)] + [0.0] * 10,
        "running": [4.0] * 25,
    }
    assert "requests waiting 0→0" in explain_knee_old_text(before, after)  # the bug, as it read
    found = explain_knee(before, ServerLimits(), after)
    assert found.limit == "lora_slots"
    assert "adapters waited for a slot in 25 of 35 s" in found.evidence
    assert "requests waiting 12→5 (at most 89)" in found.evidence


def explain_knee_old_text(before, after) -> str:
    """How the evidence read the queue before: the whole window's first and last second."""
    from rampwatch.core.figures.knee_window import from_to_text

    return f"requests waiting {from_to_text(KneeWindow(before, after), 'waiting')}"


@pytest.mark.parametrize(
    ("waiting", "said"),
    [
        ([3.0, 9.0, 20.0], "3→20"),
        ([3.0, 89.0, 40.0], "3→40 (at most 89)"),
        ([math.nan, 5.0, math.nan, 5.0], "5→5"),
        ([50.0, 10.0], "50→10"),
        ([math.nan], None),
        ([], None),
    ],
)
def test_waiting_while_adapters_waited(waiting, said):
    assert waiting_while_adapters_waited(np.array(waiting, dtype=float)) == said


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
    # the queue over the seconds adapters waited: requests waited in each of them
    import re

    queue = re.search(r"requests waiting (\d+)→(\d+)", why["evidence"])
    assert queue is not None and int(queue[1]) >= 1 and int(queue[2]) >= 1, why["evidence"]
