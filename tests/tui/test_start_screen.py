"""The start screen (`rampwatch` with no arguments): the shipped scenarios, the fields,
the choice it hands back, and how the command line runs it."""

from __future__ import annotations

import pytest

from rampwatch.app.start import details_text, shipped_scenarios
from rampwatch.loadgen.workload.scenario import load_scenario
from rampwatch.loadgen.workload.scenario_files import list_scenarios
from rampwatch.tui.start_screen import StartApp, StartChoice, StartScenario, make_choice

SIMULATOR = "the embedded simulator (l4, llama-3.1-8b-fp8)"
RAMP = StartScenario("chat", "Chat.", "linear 1 → 20 req/s over 120 s", 1.0, 20.0, 120.0)
FIXED = StartScenario("steady", "A fixed rate.", "constant 5 req/s")


def start_app() -> StartApp:
    return StartApp(shipped_scenarios(), SIMULATOR)


@pytest.mark.slow
def test_start_screen_80x24(snap_compare):
    assert snap_compare(start_app(), terminal_size=(80, 24))


@pytest.mark.slow
def test_start_screen_160x48(snap_compare):
    assert snap_compare(start_app(), terminal_size=(160, 48))


def test_every_shipped_scenario_is_listed_with_its_description_and_ramp():
    offered = {s.name: s for s in shipped_scenarios()}
    assert sorted(offered) == list_scenarios()
    for name, offer in offered.items():
        scenario = load_scenario(name)
        schedule = scenario.raw["schedule"]
        assert offer.description == scenario.description and offer.description  # one line each
        assert "\n" not in offer.description
        ramp = (schedule["start_rps"], schedule["end_rps"], schedule["duration_s"]) if "start_rps" in schedule else None
        assert (offer.start_rps, offer.end_rps, offer.duration_s) == (ramp or (None, None, None))
        assert offer.details == details_text(scenario.raw)


def test_details_text():
    raw = {
        "endpoint": "chat",
        "schedule": {"kind": "linear", "start_rps": 1, "end_rps": 20, "duration_s": 120, "arrival": "poisson"},
        "workload": {"system_prompt": {"tokens": 60}, "input_tokens": {"min": 20, "max": 200}, "output_tokens": 128},
    }
    assert details_text(raw) == (
        "linear 1 → 20 req/s over 120 s, poisson arrivals · chat endpoint · 60 shared + 20–200 tokens in · "
        "128 tokens out"
    )
    assert details_text({"schedule": {"kind": "constant", "rate": 5}}).startswith("constant 5 req/s")
    assert details_text({**raw, "drain": "cap:30"}).endswith("128 tokens out · drain cap:30")
    trace = {"kind": "trace", "path": "/data/mooncake_trace.jsonl", "format": "mooncake", "speed": 2}
    assert details_text({"schedule": trace}).startswith("trace mooncake_trace.jsonl (mooncake) at speed ×2 · ")
    ramp = {**trace, "speed": {"start": 1, "end": 4}}
    assert details_text({"schedule": ramp}).startswith("trace mooncake_trace.jsonl (mooncake) at speed ×1 → ×4 · ")
    mixed = {"schedule": {"kind": "constant", "rate": 5}, "workload": {"mix": [{"name": "chat"}, {"name": "code"}]}}
    assert details_text(mixed).endswith("completions endpoint · mix of 2: chat, code")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (("", "1", "20", "120"), StartChoice("chat", None, 1.0, 20.0, 120.0)),
        ((" http://gpu:8000 ", "0", "30", "60"), StartChoice("chat", "http://gpu:8000", 0.0, 30.0, 60.0)),
        (("gpu:8000", "1", "20", "120"), "target 'gpu:8000': expected an http:// or https:// URL"),
        (("http://gpu:80x", "1", "20", "120"), "target: Port could not be cast"),
        (("http://", "1", "20", "120"), "target: the URL has no host"),
        (("", "one", "20", "120"), "start rps: 'one' is not a number"),
        (("", "1", "-2", "120"), "end rps: -2 must be 0 or more"),
        (("", "1", "20", "0"), "duration s: 0 must be above 0"),
        (("", "1", "20", "nan"), "duration s: nan must be above 0"),
    ],
)
def test_make_choice(fields, expected):
    got = make_choice(RAMP, *fields)
    if isinstance(expected, str):
        assert isinstance(got, str) and got.startswith(expected) and "\n" not in got
    else:
        assert got == expected


def test_a_scenario_without_a_ramp_keeps_its_schedule():
    choice = make_choice(FIXED, "", "", "", "")
    assert choice == StartChoice("steady", None, None, None, None)
    assert choice.run_args() == ["steady"]
    assert StartChoice("chat", "http://h:1", 1.0, 2.5, 60.0).run_args() == [
        "chat",
        "--target",
        "http://h:1",
        "--start-rps",
        "1",
        "--end-rps",
        "2.5",
        "--duration",
        "60",
    ]


@pytest.mark.slow
async def test_pick_edit_and_start():
    app = StartApp([RAMP, FIXED], SIMULATOR)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.focused.id == "start-scenarios"
        await pilot.press("enter")  # the highlighted scenario: on to the target
        assert app.focused.id == "start-target"
        await pilot.press(*"http://gpu:8000", "tab", "tab", "tab", *"45", "enter")
    assert app.return_value == StartChoice("chat", "http://gpu:8000", 1.0, 20.0, 45.0)


@pytest.mark.slow
async def test_a_scenario_without_a_ramp_disables_the_ramp_fields():
    from textual.widgets import Input

    app = StartApp([RAMP, FIXED], SIMULATOR)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("down")
        assert all(app.query_one(f"#start-{f}", Input).disabled for f in ("from", "to", "duration"))
        await pilot.press("ctrl+s")
    assert app.return_value == StartChoice("steady", None, None, None, None)


@pytest.mark.slow
async def test_a_bad_field_names_itself_and_does_not_start():
    from textual.widgets import Button, Static

    app = StartApp([RAMP], SIMULATOR)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("enter", *"gpu:8000", "enter")
        assert app.is_running  # not started
        problem = str(app.query_one("#start-problem", Static).render())
        assert problem.startswith("target 'gpu:8000': expected an http:// or https:// URL")
        assert app.query_one("#start-go", Button).disabled
        await pilot.press("escape")
    assert app.return_value is None


def test_rampwatch_without_arguments_runs_the_choice_as_rampwatch_run(monkeypatch):
    import rampwatch.app.run as run_command
    import rampwatch.app.start as start
    from rampwatch.app import cli
    from rampwatch.app.run_config import RunConfig

    ran = []
    monkeypatch.setattr(cli, "on_a_terminal", lambda: True)
    choice = StartChoice("chat", None, None, None, 30.0)
    monkeypatch.setattr(start, "choose_run", lambda: start.run_config(choice))
    monkeypatch.setattr(run_command, "run", lambda config: ran.append(config) or 0)
    assert cli.main([]) == 0
    # every flag but the chosen ones at `rampwatch run`'s default, as its command line would have it
    assert ran == [RunConfig.from_cli_args(cli.build_parser()[0].parse_args(["run", "chat", "--duration", "30"]))]
    monkeypatch.setattr(start, "choose_run", lambda: None)  # left with esc: nothing runs
    assert cli.main([]) == 0 and len(ran) == 1


def test_rampwatch_without_arguments_and_without_a_terminal_prints_the_usage(capsys):
    from rampwatch.app import cli

    assert cli.main([]) == 2
    assert "usage: rampwatch" in capsys.readouterr().out
