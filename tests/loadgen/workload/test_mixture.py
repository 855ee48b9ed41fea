import textwrap

import numpy as np
import pytest

from rampwatch.core.errors import UserError
from rampwatch.core.figures.classes import class_slos
from rampwatch.loadgen.workload.mixture import cumulative_weights, pick_class
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario

MIXED = """\
name: mixed
seed: 7
schedule: {kind: poisson, rate: 5, duration_s: 10}
slo: {ttft_ms: 1000, tpot_ms: 80}
workload:
  mix:
    - name: chat
      weight: 5
      input_tokens: 40
      output_tokens: 12
      slo: {ttft_ms: 300}
    - name: classify
      weight: 3
      documents: {count: 2, tokens: 100}
      input_tokens: 20
      output_tokens: 3
    - name: code
      weight: 2
      input_tokens: 250
      output_tokens: 6
"""


def write(tmp_path, text):
    path = tmp_path / "mix.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_class_builds_its_requests_with_its_own_workload(tmp_path):
    factory = RequestFactory(load_scenario(write(tmp_path, MIXED)))
    lengths = {"chat": (40, 12), "classify": (100 + 20, 3), "code": (250, 6)}
    requests = [factory.next_request() for _ in range(60)]
    assert {r.request_class for r in requests} == set(lengths)
    for r in requests:
        expected_in, expected_out = lengths[r.request_class]
        # a document's request: the document, a blank line, then its own text
        assert expected_in <= r.expected_prompt_tokens <= expected_in + 2
        assert r.max_tokens == expected_out


def test_class_counts_follow_the_weights(tmp_path):
    factory = RequestFactory(load_scenario(write(tmp_path, MIXED)))
    n = 3000
    classes = [factory._mixture.next_class() for _ in range(n)]
    observed = np.bincount(classes, minlength=3)
    expected = n * np.array([5, 3, 2]) / 10
    chi_square = float(((observed - expected) ** 2 / expected).sum())
    # 2 degrees of freedom: above 13.8 one seed in a thousand
    assert chi_square < 13.8, (observed, expected)


def test_the_same_seed_gives_the_same_class_sequence(tmp_path):
    path = write(tmp_path, MIXED)
    a = RequestFactory(load_scenario(path))
    b = RequestFactory(load_scenario(path))
    sequence = [a.next_request().request_class for _ in range(50)]
    assert sequence == [b.next_request().request_class for _ in range(50)]
    other = RequestFactory(load_scenario(path, flags={"seed": 8}))
    assert sequence != [other.next_request().request_class for _ in range(50)]


@pytest.mark.parametrize(
    ("weights", "u", "expected"),
    [
        ([1, 1], 0.0, 0),
        ([1, 1], 0.4999, 0),
        ([1, 1], 0.5, 1),
        ([5, 3, 2], 0.79, 1),
        ([5, 3, 2], 0.9999, 2),
        ([2], 0.7, 0),
    ],
)
def test_pick_class_splits_the_unit_interval_by_weight(weights, u, expected):
    assert pick_class(cumulative_weights(weights), u) == expected


def test_class_slos_replace_the_scenario_keys_with_the_class_ones(tmp_path):
    scenario = load_scenario(write(tmp_path, MIXED))
    assert class_slos(scenario.raw) == {
        "chat": {"ttft_ms": 300.0, "tpot_ms": 80.0},
        "classify": {"ttft_ms": 1000.0, "tpot_ms": 80.0},
        "code": {"ttft_ms": 1000.0, "tpot_ms": 80.0},
    }
    assert class_slos({"workload": {"input_tokens": 3}}) == {}
    assert class_slos(None) == {}


CLASS = "      input_tokens: 4\n      output_tokens: 4\n"


@pytest.mark.parametrize(
    ("mix", "expected"),
    [
        ("  mix: []\n", ":4: workload.mix: expected a list of classes"),
        (
            "  mix:\n    - name: a\n      weight: 0\n" + CLASS,
            ":6: workload.mix[0].weight: expected a number > 0, got 0",
        ),
        ("  mix:\n    - name: a\n" + CLASS, ":5: workload.mix[0].weight: required key is missing"),
        (
            "  mix:\n    - name: a\n      weight: 1\n" + CLASS + "    - name: a\n      weight: 1\n" + CLASS,
            ":9: workload.mix[1].name: duplicate class name 'a' (also workload.mix[0])",
        ),
        (
            "  mix:\n    - name: a\n      weight: 1\n" + CLASS + "      mix: []\n",
            ":9: workload.mix[0].mix: a class cannot itself be a mixture",
        ),
        (
            "  input_tokens: 4\n  mix:\n    - name: a\n      weight: 1\n" + CLASS,
            ":4: workload.input_tokens: cannot be combined with workload.mix",
        ),
        (
            "  mix:\n    - name: a\n      weight: 1\n      input_tokens: 4\n",
            ":5: workload.mix[0].output_tokens: required key is missing",
        ),
        (
            "  mix:\n    - name: a\n      weight: 1\n      slo: {ttft: 3}\n" + CLASS,
            ":7: workload.mix[0].slo.ttft: unknown key",
        ),
        (
            "  mix:\n    - name: a\n      weight: 1\n      dataset: {path: nope.json}\n" + CLASS,
            ":7: workload.mix[0].dataset.path: dataset file not found: nope.json",
        ),
        (
            "  mix:\n    - name: a\n      weight: 1\n      sessions: {users: 3}\n" + CLASS,
            ":7: workload.mix[0].sessions: sessions cannot be a mixture class",
        ),
    ],
)
def test_mixture_errors_name_file_line_and_key(tmp_path, mix, expected):
    path = write(tmp_path, "name: bad\nschedule: {kind: poisson, rate: 1}\nworkload:\n" + mix)
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(path + expected), str(exc.value)


@pytest.mark.slow
def test_the_shipped_mixture_runs_headless_with_per_class_figures(tmp_path):
    """scenarios/mixed.yaml on the embedded simulator: a short run, every class in the
    result JSON's per_class section in the top level's schema."""
    import json
    import subprocess
    import sys

    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", "mixed", "--headless", "--no-record"]
        + ["--duration", "2", "--sim-hardware", "h100", "--result-json", str(result)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout[proc.stdout.index("Classes (") :].splitlines()
    assert table[1].split() == ["chat", "classification", "code-generation"]
    top = json.loads(result.read_text())
    per_class = top.pop("per_class")
    assert list(per_class) == ["chat", "classification", "code-generation"]
    for figures in per_class.values():
        assert list(figures) == list(top)
    assert sum(c["completed"] for c in per_class.values()) == top["completed"] > 0
    assert per_class["chat"]["total_output_tokens"] / max(per_class["chat"]["completed"], 1) >= 50


def test_a_mixture_cannot_take_a_trace_schedule(tmp_path):
    path = write(
        tmp_path,
        "name: bad\nschedule: {kind: trace, path: trace.jsonl}\nworkload:\n  mix:\n"
        "    - name: a\n      weight: 1\n" + CLASS,
    )
    (tmp_path / "trace.jsonl").write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n')
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(path + ":4: workload.mix: cannot be combined with schedule.kind trace"), str(
        exc.value
    )


def test_a_class_slo_can_bound_the_time_to_first_answer(tmp_path):
    text = MIXED.replace("slo: {ttft_ms: 300}", "slo: {ttfa_ms: 2500}")
    scenario = load_scenario(write(tmp_path, text))
    assert class_slos(scenario.raw)["chat"] == {"ttft_ms": 1000.0, "tpot_ms": 80.0, "ttfa_ms": 2500.0}
