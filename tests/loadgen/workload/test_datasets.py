import json

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.datasets import load_dataset
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.tokenizers import load_tokenizer

SIM = load_tokenizer(None)

SHAREGPT = [
    {
        "conversations": [
            {"from": "human", "value": "alpha beta gamma"},
            {"from": "gpt", "value": "one two three four five"},
        ]
    },
    {"conversations": [{"from": "human", "value": "only a question"}]},
    {
        "conversations": [
            {"from": "human", "value": "delta"},
            {"from": "gpt", "value": "six seven"},
            {"from": "human", "value": "more"},
        ]
    },
]


def scenario_file(tmp_path, dataset_path, endpoint="completions", extra=""):
    path = tmp_path / "ds.yaml"
    path.write_text(
        f"endpoint: {endpoint}\nschedule: {{kind: poisson, rate: 1}}\nworkload:\n"
        f"  dataset: {{path: {dataset_path}}}\n{extra}"
    )
    return str(path)


def test_sharegpt_takes_the_first_two_turns(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(SHAREGPT))
    entries = load_dataset(f)
    assert [(e.prompt, e.answer) for e in entries] == [
        ("alpha beta gamma", "one two three four five"),
        ("delta", "six seven"),
    ]


def test_sharegpt_output_length_comes_from_the_answer(tmp_path):
    f = tmp_path / "sg.json"
    f.write_text(json.dumps(SHAREGPT))
    sc = load_scenario(scenario_file(tmp_path, "sg.json"))  # relative to the scenario file
    factory = RequestFactory(sc, SIM)
    reqs = [factory.next_request() for _ in range(4)]
    by_prompt = {r.payload["prompt"]: r for r in reqs}
    assert by_prompt["alpha beta gamma"].max_tokens == 5 and by_prompt["alpha beta gamma"].expected_prompt_tokens == 3
    assert by_prompt["delta"].max_tokens == 2
    # Every entry is used once per pass through the data.
    assert sorted(r.payload["prompt"] for r in reqs) == sorted(["alpha beta gamma", "delta"] * 2)


def test_prompt_jsonl_takes_output_lengths_from_the_scenario(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a b c"}\n\n{"prompt": "d e"}\n')
    sc = load_scenario(scenario_file(tmp_path, f, extra="  output_tokens: 42\n  system_prompt: {text: sys words}\n"))
    req = RequestFactory(sc, SIM).next_request()
    assert req.max_tokens == 42 and req.payload["prompt"].startswith("sys words\n\n")
    assert req.expected_prompt_tokens == len(SIM.encode(req.payload["prompt"]))


def test_prompt_jsonl_without_output_lengths_is_rejected(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a b c"}\n')
    path = tmp_path / "ds.yaml"
    path.write_text(f"schedule: {{kind: poisson, rate: 1}}\nworkload:\n  dataset: {{path: {f}, format: prompts}}\n")
    with pytest.raises(UserError, match=r":2: workload.output_tokens: required key is missing \(only ShareGPT"):
        load_scenario(str(path))


def test_messages_jsonl_goes_to_the_chat_endpoint_as_is(tmp_path):
    f = tmp_path / "m.jsonl"
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    f.write_text(json.dumps({"messages": msgs}) + "\n")
    sc = load_scenario(scenario_file(tmp_path, f, endpoint="chat", extra="  output_tokens: 7\n"))
    req = RequestFactory(sc, SIM).next_request()
    assert req.payload["messages"] == msgs and req.payload["max_completion_tokens"] == 7
    assert req.expected_prompt_tokens == 4


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("bad.json", '[{"conversations": [', r"bad.json:1: not valid JSON"),
        ("obj.json", '{"conversations": []}', r"obj.json: expected a ShareGPT JSON list"),
        ("p.jsonl", '{"prompt": "ok"}\n{"prompt": 3}\n', r"p.jsonl:2: expected \{\"prompt\": \"text\"\}"),
        ("m.jsonl", '{"messages": [{"role": "robot", "content": "x"}]}\n', r"m.jsonl:1: expected \{\"messages\""),
        ("j.jsonl", '{"prompt": "ok"}\nnot json\n', r"j.jsonl:2: not valid JSON"),
        ("x.jsonl", '{"text": "?"}\n', r"x.jsonl: cannot tell the dataset format"),
        ("e.json", "[]", r"e.json: no usable entries"),
    ],
)
def test_bad_dataset_files_name_the_file(tmp_path, name, content, message):
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(UserError, match=message) as exc:
        load_dataset(f)
    assert str(exc.value).startswith(str(f))


def test_missing_dataset_file(tmp_path):
    with pytest.raises(UserError, match="dataset file not found"):
        load_dataset(tmp_path / "nope.json")
