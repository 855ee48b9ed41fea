import json
import textwrap

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.request_factory import RequestFactory, length_bounds
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.scenario_files import list_scenarios
from rampwatch.loadgen.workload.scenario_overrides import FLAG_KEYS, apply_overrides
from rampwatch.loadgen.workload.schedule_spec import KINDS
from rampwatch.loadgen.workload.tokenizers import load_tokenizer

SHIPPED = ["chat", "classification", "code-generation", "random", "prefix-heavy"]
SIM = load_tokenizer(None)


def count(text):
    return len(SIM.encode(text))


def test_shipped_scenarios_are_listed():
    assert set(SHIPPED) <= set(list_scenarios())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_scenario_builds_requests_of_the_declared_lengths(name):
    sc = load_scenario(name)
    json.dumps(sc.raw, allow_nan=False)  # goes into the recording header as is
    assert sc.duration_s and sc.duration_s > 0 and sc.build_schedule().state == "ramping"
    w = sc.workload
    in_lo, in_hi = length_bounds(w["input_tokens"])
    out_lo, out_hi = length_bounds(w["output_tokens"])
    factory = RequestFactory(sc, SIM)
    for _ in range(25):
        req = factory.next_request()
        assert req.endpoint == sc.endpoint
        if sc.endpoint == "chat":
            assert req.payload["max_completion_tokens"] == req.max_tokens
            contents = [m["content"] for m in req.payload["messages"]]
            assert sum(count(c) for c in contents) == req.expected_prompt_tokens
            own = count(contents[-1])
            if req.extra.get("turn", 1) == 1 and "doc" in req.extra:
                own -= count(factory.document(req.extra["doc"]))
        else:
            assert req.payload["max_tokens"] == req.max_tokens
            prompt = req.payload["prompt"]
            assert (count(prompt) if isinstance(prompt, str) else len(prompt)) == req.expected_prompt_tokens
            own = req.expected_prompt_tokens - req.extra["shared_prefix_tokens"]
        assert in_lo <= own <= in_hi, (own, in_lo, in_hi)
        assert out_lo <= req.max_tokens <= out_hi
        assert req.payload.get("ignore_eos") is True


def test_classification_totals_match_the_profile():
    sc = load_scenario("classification")
    factory = RequestFactory(sc, SIM)
    totals = [factory.next_request().expected_prompt_tokens for _ in range(30)]
    assert all(8000 <= t <= 12000 for t in totals)
    assert max(totals) - min(totals) > 1000


def test_requests_are_deterministic_for_the_seed():
    sc = load_scenario("prefix-heavy")
    a = [RequestFactory(sc, SIM).next_request().payload]
    fa, fb = RequestFactory(sc, SIM), RequestFactory(sc, SIM)
    assert [fa.next_request().payload for _ in range(10)] == [fb.next_request().payload for _ in range(10)]
    other = RequestFactory(load_scenario("prefix-heavy", overrides=[("seed", "5")]), SIM)
    assert other.next_request().payload != a[0]


def test_documents_give_identical_prefixes():
    sc = load_scenario("classification")
    factory = RequestFactory(sc, SIM)
    by_doc = {}
    for _ in range(30):
        req = factory.next_request()
        by_doc.setdefault(req.extra["doc"], []).append(req.payload["prompt"])
    system = factory.system_prompt()
    assert len(by_doc) >= 2
    for doc, prompts in by_doc.items():
        shared = system + "\n\n" + factory.document(doc)
        assert all(p.startswith(shared) for p in prompts)
        assert len({p for p in prompts}) == len(prompts)  # the tails differ
    docs = [factory.document(d) for d in by_doc]
    assert len(set(docs)) == len(docs)
    assert all(count(d) == 7800 for d in docs)


def test_zipf_favours_the_first_document():
    sc = load_scenario("classification", overrides=[("workload.documents.count", "8")])
    factory = RequestFactory(sc, SIM)
    picks = [factory._pick_doc() for _ in range(4000)]
    shares = [picks.count(i) / len(picks) for i in range(8)]
    assert shares[0] > shares[1] > shares[3] > shares[7]


def test_conversation_turns_resend_the_history():
    sc = load_scenario("prefix-heavy", overrides=[("workload.conversations.count", "2")])
    factory = RequestFactory(sc, SIM)
    seen, answer_lengths = {}, {}
    for _ in range(30):
        req = factory.next_request()
        conv, turn = req.extra["conversation"], req.extra["turn"]
        msgs = req.payload["messages"]
        assert req.tag == f"conv-{conv}/turn-{turn}"
        assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * (turn - 1) + ["user"]
        if turn > 1:
            previous = seen[(conv, turn - 1)]
            assert msgs[: len(previous)] == previous
            # The resent answer is synthetic text as long as that turn's max_tokens.
            assert count(msgs[len(previous)]["content"]) == answer_lengths[(conv, turn - 1)]
        seen[(conv, turn)] = msgs
        answer_lengths[(conv, turn)] = req.max_tokens
        assert turn <= 4
    assert any(t == 4 for _, t in seen)


def test_token_id_prompts():
    sc = load_scenario("random", overrides=[("workload.prompt_format", "token_ids")])
    req = RequestFactory(sc, SIM).next_request()
    assert isinstance(req.payload["prompt"], list) and len(req.payload["prompt"]) == 1024
    assert all(isinstance(i, int) and 0 <= i < SIM.vocab_size for i in req.payload["prompt"])


# ---------------------------------------------------------------- validation


def write(tmp_path, text, name="bad.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return str(path)


GOOD_WORKLOAD = """\
workload:
  input_tokens: 100
  output_tokens: 10
"""


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            """\
            name: x
            schedule:
              kind: linear
              start_rps: 1
              end_rps: fast
              duration_s: 60
            """,
            ":5: schedule.end_rps: expected a number >= 0, got 'fast'",
        ),
        (
            """\
            schedule:
              kind: linear
              start_rps: 1
              end_rsp: 20
              duration_s: 60
            """,
            ":4: schedule.end_rsp: unknown key; did you mean 'end_rps'?",
        ),
        (
            """\
            schedule:
              kind: poisson
              rate: 3
            workload:
              input_tokens: {dist: uniform, min: 50, max: 10}
              output_tokens: 10
            """,
            ":5: workload.input_tokens.max: expected a number >= min (50), got 10",
        ),
        (
            """\
            schedule:
              kind: steps
              steps:
                - {rate: 1, duration_s: 10}
                - {rate: -2, duration_s: 10}
            """,
            ":5: schedule.steps[1].rate: expected a number >= 0, got -2",
        ),
        (
            """\
            endpoint: chat
            schedule: {kind: poisson, rate: 2}
            workload:
              prompt_format: token_ids
              input_tokens: 10
              output_tokens: 10
            """,
            ":4: workload.prompt_format: expected text with endpoint chat",
        ),
        (
            """\
            schedule: {kind: poisson, rate: 2}
            endpiont: chat
            """,
            ":2: endpiont: unknown key; did you mean 'endpoint'?",
        ),
        (
            """\
            schedule:
              kind: linear
              start_rps: 1
              end_rps: 5
            """,
            ":1: schedule.duration_s: required key is missing",
        ),
        (
            """\
            schedule: {kind: poisson, rate: 2}
            slo:
              ttft_ms: 0
            """,
            ":3: slo.ttft_ms: expected a number > 0, got 0",
        ),
    ],
)
def test_validation_errors_name_file_line_and_key(tmp_path, body, expected):
    text = textwrap.dedent(body)
    if "workload:" not in text:
        text += GOOD_WORKLOAD
    path = write(tmp_path, text)
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    message = str(exc.value)
    assert message.startswith(path + expected), message


def test_several_problems_are_all_reported_one_a_line(tmp_path):
    path = write(tmp_path, "seed: -1\nschedule: {kind: poisson, rate: 0}\n" + GOOD_WORKLOAD)
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    assert str(exc.value).splitlines() == [
        f"{path}:1: seed: expected an integer >= 0, got -1",
        f"  also {path}:2: schedule.rate: expected a number > 0, got 0",
    ]


def test_bad_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "schedule:\n  kind: [poisson\n")
    with pytest.raises(UserError, match=rf"^{path}:\d+: not valid YAML"):
        load_scenario(path)


def test_unknown_scenario_name_lists_the_builtins():
    with pytest.raises(UserError, match="built-in: .*chat"):
        load_scenario("chatty")


def test_dataset_path_must_exist(tmp_path):
    path = write(tmp_path, "schedule: {kind: poisson, rate: 1}\nworkload:\n  dataset: {path: nope.json}\n")
    with pytest.raises(UserError, match=rf"^{path}:3: workload.dataset.path: dataset file not found: nope.json"):
        load_scenario(path)


# ---------------------------------------------------------------- overrides


def test_set_overrides_any_key_with_yaml_typed_values():
    sc = load_scenario(
        "chat", overrides=[("schedule.end_rps", "40"), ("workload.output_tokens", "64"), ("max_concurrency", "8")]
    )
    assert sc.schedule_spec["end_rps"] == 40
    assert sc.workload["output_tokens"] == {"dist": "fixed", "value": 64}
    assert sc.max_concurrency == 8 and sc.raw["max_concurrency"] == 8


def test_set_can_replace_the_schedule_kind():
    sc = load_scenario(
        "chat", overrides=[("schedule", "{kind: vllm-linear, start_rps: 1, end_rps: 8, num_requests: 50}")]
    )
    assert sc.schedule_spec["kind"] == "vllm-linear" and sc.duration_s > 0


def test_bad_override_is_reported_as_from_the_command_line():
    with pytest.raises(UserError) as exc:
        load_scenario("chat", overrides=[("schedule.end_rps", "fast")])
    assert str(exc.value).endswith(
        "chat.yaml: schedule.end_rps (set on the command line): expected a number >= 0, got 'fast'"
    )


def test_named_flags_set_their_documented_keys():
    flags = {"duration": 30, "start_rps": 2, "end_rps": 9, "seed": 4, "max_concurrency": 16, "model": "m"}
    sc = load_scenario("chat", flags=flags)
    assert set(flags) == set(FLAG_KEYS)
    assert (sc.schedule_spec["duration_s"], sc.schedule_spec["start_rps"], sc.schedule_spec["end_rps"]) == (30, 2, 9)
    assert (sc.seed, sc.max_concurrency, sc.model, sc.duration_s) == (4, 16, "m", 30)
    assert load_scenario("chat", flags={"seed": None}).seed == 0


def test_set_wins_over_named_flags():
    sc = load_scenario("chat", overrides=[("seed", "9")], flags={"seed": 4})
    assert sc.seed == 9


@pytest.mark.parametrize(
    "schedule, flags, message",
    [
        ("{kind: poisson, rate: 2}", {"start_rps": 3}, "--start-rps: schedule kind 'poisson' has no start_rps"),
        (
            "{kind: vllm-linear, start_rps: 1, end_rps: 2, num_requests: 9}",
            {"duration": 3},
            "--duration: schedule kind 'vllm-linear' is bounded by request count",
        ),
    ],
)
def test_flags_that_do_not_fit_the_schedule(tmp_path, schedule, flags, message):
    path = write(tmp_path, f"schedule: {schedule}\n" + GOOD_WORKLOAD)
    with pytest.raises(UserError, match=message):
        load_scenario(path, flags=flags)


def test_apply_overrides_does_not_touch_the_input_and_indexes_lists():
    base = {"schedule": {"kind": "steps", "steps": [{"rate": 1, "duration_s": 5}]}}
    out = apply_overrides(base, [("schedule.steps.0.rate", "7"), ("workload.system_prompt.tokens", "12")])
    assert out["schedule"]["steps"][0]["rate"] == 7 and base["schedule"]["steps"][0]["rate"] == 1
    assert out["workload"] == {"system_prompt": {"tokens": 12}}
    with pytest.raises(UserError, match="index out of range"):
        apply_overrides(base, [("schedule.steps.3.rate", "1")])
    with pytest.raises(UserError, match="dotted key path"):
        apply_overrides(base, [("schedule..rate", "1")])


def test_setting_another_schedule_kind_leaves_the_files_old_kind_keys_out():
    # random.yaml ramps (kind linear, start_rps, end_rps): a constant rate from the command line
    scn = load_scenario("random", overrides=[("schedule.kind", "constant"), ("schedule.rate", "20")])
    assert scn.schedule_spec["kind"] == "constant" and scn.schedule_spec["rate"] == 20
    assert "start_rps" not in scn.schedule_spec and "end_rps" not in scn.schedule_spec
    assert scn.schedule_spec["duration_s"] == load_scenario("random").schedule_spec["duration_s"]  # both kinds take it
    # what the user set is still checked, and what the new kind needs is asked for
    with pytest.raises(UserError, match=r"schedule.start_rps \(set on the command line\): unknown key"):
        load_scenario("random", overrides=[("schedule.kind", "constant"), ("schedule.start_rps", "3")])
    with pytest.raises(UserError, match=r"schedule.rate: required key is missing"):
        load_scenario("random", overrides=[("schedule.kind", "constant")])


@pytest.mark.parametrize("value, got", [("[1]", "a list"), ("{a: 1}", "a mapping")])
def test_a_schedule_kind_that_is_not_a_name_is_one_line(tmp_path, value, got):
    # --set schedule.kind=[1] once raised TypeError (unhashable) before the kind was checked
    with pytest.raises(UserError) as info:
        load_scenario("random", overrides=[("schedule.kind", value)])
    assert str(info.value) == (
        f"scenarios/random.yaml: schedule.kind (set on the command line): expected one of {', '.join(KINDS)}, got {got}"
    )
    # the same kind written in a file
    path = write(tmp_path, f"name: k\nschedule:\n  kind: {value}\n  duration_s: 5\n" + GOOD_WORKLOAD)
    with pytest.raises(UserError, match=rf"bad.yaml:3: schedule.kind: expected one of .*, got {got}$"):
        load_scenario(path)
