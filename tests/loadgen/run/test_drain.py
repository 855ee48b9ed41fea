"""The drain policy (``--drain``, the scenario's ``drain:``): its syntax, its errors, and
where it comes from."""

import re

import pytest

from rampwatch.app.cli import main
from rampwatch.core.errors import UserError
from rampwatch.loadgen.run.drain import DrainPolicy, drain_policy_of, parse_drain
from rampwatch.loadgen.workload.scenario import load_scenario


@pytest.mark.parametrize(
    ("text", "policy", "limit_s"),
    [
        ("wait", DrainPolicy("wait"), None),
        ("cancel", DrainPolicy("cancel"), 0.0),
        ("cap:30", DrainPolicy("cap", 30.0), 30.0),
        ("cap:2.5s", DrainPolicy("cap", 2.5), 2.5),
        (" CAP:0 ", DrainPolicy("cap", 0.0), 0.0),
    ],
)
def test_parse_drain(text, policy, limit_s):
    parsed = parse_drain(text)
    assert parsed == policy and parsed.limit_s == limit_s
    assert parse_drain(str(parsed)) == parsed  # what the recording keeps reads back the same


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("stop", "expected wait, cap:SECONDS or cancel, got 'stop'"),
        ("cap", "expected wait, cap:SECONDS or cancel, got 'cap'"),
        ("cap:-1", "expected cap:SECONDS with SECONDS from 0 to 86400 (a day), got 'cap:-1'"),
        ("cap:inf", "expected cap:SECONDS with SECONDS from 0 to 86400 (a day), got 'cap:inf'"),
        ("cap:soon", "expected cap:SECONDS with SECONDS from 0 to 86400 (a day), got 'cap:soon'"),
        # Python's float would take these: 10, 1e20 s, 16
        ("cap:1_0", "expected cap:SECONDS with SECONDS from 0 to 86400 (a day), got 'cap:1_0'"),
        ("cap:1e20", "expected cap:SECONDS with SECONDS from 0 to 86400 (a day), got 'cap:1e20'"),
        (
            "cap:99999999999999999999",
            "expected cap:SECONDS with SECONDS from 0 to 86400 (a day), got 'cap:99999999999999999999'",
        ),
        ("cap: 5", "expected cap:SECONDS with SECONDS from 0 to 86400 (a day), got 'cap: 5'"),
    ],
)
def test_a_bad_drain_policy_says_what_was_expected(capsys, text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_drain(text)
    with pytest.raises(SystemExit) as exited:
        main(["run", "chat", "--drain", text])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"rampwatch run: error: argument --drain: {message}"


def test_a_scenarios_drain_key_is_checked_with_its_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "schedule: {kind: constant, rate: 1, duration_s: 5}\nworkload: {input_tokens: 8, output_tokens: 8}\ndrain: later\n"
    )
    with pytest.raises(UserError, match=rf"^{path}:3: drain: expected wait, cap:SECONDS or cancel, got 'later'"):
        load_scenario(str(path))
    path.write_text(
        "schedule: {kind: constant, rate: 1, duration_s: 5}\nworkload: {input_tokens: 8, output_tokens: 8}\ndrain: cap:20\n"
    )
    scenario = load_scenario(str(path))
    assert scenario.drain == DrainPolicy("cap", 20.0) and scenario.raw["drain"] == "cap:20"
    assert load_scenario(str(path), overrides=[("drain", "cancel")]).drain == DrainPolicy("cancel")


def test_a_recordings_drain_policy():
    assert drain_policy_of({"drain": "cap:30"}) == DrainPolicy("cap", 30.0)
    assert drain_policy_of({}) == DrainPolicy() == drain_policy_of(None)  # older recordings waited
