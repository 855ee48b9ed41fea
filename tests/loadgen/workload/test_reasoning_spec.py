"""A workload's reasoning fields: checked with one line naming the key, sent in every chat
request's body, per mixture class."""

import textwrap

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.workload.request_factory import RequestFactory
from rampwatch.loadgen.workload.scenario import load_scenario

HEAD = "name: think\nseed: 3\nendpoint: chat\nschedule: {kind: poisson, rate: 1, duration_s: 5}\n"


def write(tmp_path, text: str) -> str:
    path = tmp_path / "think.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_the_fields_go_in_every_chat_request(tmp_path):
    scenario = load_scenario(
        write(
            tmp_path,
            HEAD + "workload:\n  input_tokens: 8\n  output_tokens: 4\n  reasoning_effort: high\n"
            "  chat_template_kwargs: {enable_thinking: true}\n  extra_body: {temperature: 0.6}\n",
        )
    )
    request = RequestFactory(scenario).next_request()
    assert request.payload["reasoning_effort"] == "high"
    assert request.payload["chat_template_kwargs"] == {"enable_thinking": True}
    assert request.payload["temperature"] == 0.6


def test_a_workload_without_them_sends_none(tmp_path):
    scenario = load_scenario(write(tmp_path, HEAD + "workload:\n  input_tokens: 8\n  output_tokens: 4\n"))
    payload = RequestFactory(scenario).next_request().payload
    assert "reasoning_effort" not in payload and "chat_template_kwargs" not in payload


def test_each_class_sends_its_own(tmp_path):
    text = HEAD + textwrap.dedent(
        """\
        workload:
          mix:
            - {name: deep, weight: 1, input_tokens: 8, output_tokens: 4, reasoning_effort: high}
            - name: quick
              weight: 1
              input_tokens: 8
              output_tokens: 4
              chat_template_kwargs: {enable_thinking: false}
            - {name: plain, weight: 1, input_tokens: 8, output_tokens: 4}
        """
    )
    factory = RequestFactory(load_scenario(write(tmp_path, text)))
    seen = {}
    for _ in range(60):
        request = factory.next_request()
        fields = {k: request.payload[k] for k in ("reasoning_effort", "chat_template_kwargs") if k in request.payload}
        assert seen.setdefault(request.request_class, fields) == fields
    assert seen == {
        "deep": {"reasoning_effort": "high"},
        "quick": {"chat_template_kwargs": {"enable_thinking": False}},
        "plain": {},
    }


@pytest.mark.parametrize(
    "head, workload, expected",
    [
        (
            HEAD,
            "  reasoning_effort: extreme\n",
            ":8: workload.reasoning_effort: expected one of none, minimal, low, medium, high, xhigh, max, got 'extreme'",
        ),
        (HEAD, "  reasoning_effort: 3\n", ":8: workload.reasoning_effort: expected one of none"),
        (
            HEAD,
            "  chat_template_kwargs: off\n",
            ":8: workload.chat_template_kwargs: expected a mapping of the chat template's arguments, got false",
        ),
        (
            HEAD,
            "  chat_template_kwargs: {enable thinking: false}\n",
            ":8: workload.chat_template_kwargs.enable thinking: expected a template argument's name",
        ),
        (
            HEAD.replace("endpoint: chat", "endpoint: completions"),
            "  reasoning_effort: low\n",
            ":8: workload.reasoning_effort: needs endpoint chat (completions have no chat template), got 'completions'",
        ),
        (
            HEAD,
            "  reasoning_effort: low\n  extra_body: {reasoning_effort: high}\n",
            ":9: workload.extra_body.reasoning_effort: is set by workload.reasoning_effort already: set it there only",
        ),
        (
            HEAD,
            "  reasoning_efort: low\n",
            ":8: workload.reasoning_efort: unknown key; did you mean 'reasoning_effort'?",
        ),
    ],
)
def test_bad_fields_are_one_line_naming_the_key(tmp_path, head, workload, expected):
    path = write(tmp_path, head + "workload:\n  input_tokens: 8\n  output_tokens: 4\n" + workload)
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(path + expected), str(exc.value)


def test_a_class_field_is_named_with_its_class(tmp_path):
    path = write(
        tmp_path,
        HEAD + "workload:\n  mix:\n    - name: a\n      weight: 1\n      input_tokens: 8\n"
        "      output_tokens: 4\n      reasoning_effort: lots\n",
    )
    with pytest.raises(UserError) as exc:
        load_scenario(path)
    assert str(exc.value).startswith(path + ":11: workload.mix[0].reasoning_effort: expected one of"), str(exc.value)
