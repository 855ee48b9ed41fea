"""LoRA adapters in a scenario: the ``workload.adapters`` checks, the seeded pick of each
request's adapter (its ``model``), a session keeping one, and the picks against the weights."""

import textwrap

import numpy as np
import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.adapters import AdapterPicker, adapter_names
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario

ADAPTED = """\
name: adapted
seed: 11
schedule: {kind: poisson, rate: 5, duration_s: 10}
workload:
  input_tokens: 20
  output_tokens: 4
  adapters:
    - {name: sql, weight: 3}
    - {name: chat, weight: 1}
"""


def write(tmp_path, text, name="lora.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_each_request_goes_to_an_adapter_as_its_model(tmp_path):
    factory = RequestFactory(load_scenario(write(tmp_path, ADAPTED)))
    requests = [factory.next_request() for _ in range(40)]
    assert {r.adapter for r in requests} == {"sql", "chat"}
    assert all("model" not in r.payload for r in requests)  # the client sets it from the adapter
    assert [r.labels()["adapter"] for r in requests] == [r.adapter for r in requests]


def test_a_plain_workload_sends_to_no_adapter_and_draws_the_same_prompts(tmp_path):
    plain = RequestFactory(load_scenario(write(tmp_path, ADAPTED.split("  adapters:")[0], "plain.yaml")))
    adapted = RequestFactory(load_scenario(write(tmp_path, ADAPTED)))
    for _ in range(10):
        a, b = plain.next_request(), adapted.next_request()
        assert a.adapter is None
        assert a.payload == b.payload  # the adapter picks draw from a stream of their own


def test_the_same_seed_gives_the_same_adapters_exactly(tmp_path):
    """Seeded: these are the first picks of seed 11 (3:1), whatever the machine."""
    path = write(tmp_path, ADAPTED)
    first = [RequestFactory(load_scenario(path)).next_request().adapter]
    factory = RequestFactory(load_scenario(path))
    sequence = [factory.next_request().adapter for _ in range(400)]
    assert sequence[:1] == first
    again = RequestFactory(load_scenario(path))
    assert sequence == [again.next_request().adapter for _ in range(400)]
    assert sequence.count("sql") == PINNED_SQL_OF_400
    other = RequestFactory(load_scenario(path, flags={"seed": 12}))
    assert sequence != [other.next_request().adapter for _ in range(400)]


PINNED_SQL_OF_400 = 296


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_adapter_counts_follow_the_weights_within_a_binomial_bound(seed):
    n = 4000
    picker = AdapterPicker([{"name": "a", "weight": 3.0}, {"name": "b", "weight": 1.0}], seed)
    count = sum(picker.next() == "a" for _ in range(n))
    p = 0.75
    # 4 standard deviations of a binomial count: fails about one seed in 15 000
    assert abs(count - n * p) <= 4 * np.sqrt(n * p * (1 - p)), count


def test_a_session_keeps_its_adapter_for_every_turn():
    picker = AdapterPicker([{"name": "a", "weight": 1.0}, {"name": "b", "weight": 1.0}], 5)
    picks = {session: picker.for_session(session) for session in range(50)}
    assert all(picker.for_session(session) == name for session, name in picks.items())
    assert set(picks.values()) == {"a", "b"}


def test_bare_names_weigh_one_and_mixture_classes_list_theirs(tmp_path):
    text = """\
    name: mixed
    schedule: {kind: poisson, rate: 5}
    workload:
      mix:
        - {name: x, weight: 1, input_tokens: 5, output_tokens: 2, adapters: [sql, chat]}
        - {name: y, weight: 1, input_tokens: 5, output_tokens: 2, adapters: [{name: code}, {name: sql}]}
    """
    scenario = load_scenario(write(tmp_path, text))
    assert scenario.workload["mix"][0]["adapters"] == [{"name": "sql", "weight": 1.0}, {"name": "chat", "weight": 1.0}]
    assert adapter_names(scenario.workload) == ["sql", "chat", "code"]
    factory = RequestFactory(scenario)
    pairs = {(r.request_class, r.adapter) for r in (factory.next_request() for _ in range(60))}
    assert {a for c, a in pairs if c == "x"} == {"sql", "chat"}
    assert {a for c, a in pairs if c == "y"} == {"code", "sql"}


@pytest.mark.parametrize(
    ("adapters", "expected"),
    [
        ("[]", ":6: workload.adapters: expected a list of adapters"),
        ("sql", ":6: workload.adapters: expected a list of adapters"),
        ("[{name: sql, weight: 0}]", ":6: workload.adapters[0].weight: expected a number > 0, got 0"),
        ("[{weight: 2}]", ":6: workload.adapters[0].name: required key is missing"),
        ("[sql, sql]", ":6: workload.adapters[1].name: duplicate adapter 'sql'"),
        ("[{name: sql, wieght: 2}]", ":6: workload.adapters[0].wieght: unknown key"),
        ('["a\\tb"]', ":6: workload.adapters[0].name: expected a served adapter's name"),
    ],
)
def test_adapter_errors_name_file_line_and_key(tmp_path, adapters, expected):
    path = write(
        tmp_path,
        "name: bad\nschedule: {kind: poisson, rate: 1}\nworkload:\n  input_tokens: 5\n  output_tokens: 2\n"
        f"  adapters: {adapters}\n",
    )
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(path + expected), str(exc.value)
