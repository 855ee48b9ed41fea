"""`rampwatch run`'s typed configuration: every flag is a field (under its dest), built once
from the parsed command line, and what the recording's header keeps of it."""

from __future__ import annotations

import argparse
import dataclasses
import io

import pytest

from rampwatch.app.run_config import RunConfig
from rampwatch.core.errors import UserError
from rampwatch.loadgen.run.drain import DrainPolicy


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rampwatch run")
    RunConfig.add_cli_args(parser)
    return parser.parse_args(["chat", *argv])


def test_every_flag_is_a_field_and_its_default_the_fields():
    args = parsed()
    # search: set by `rampwatch search` (app.search) from its own flags, not a run flag
    names = {f.name for f in dataclasses.fields(RunConfig)} - {"argv", "search"}
    assert names == set(vars(args))
    # a RunConfig built directly (the start screen) is the command line's with no flags
    assert RunConfig.from_cli_args(args) == RunConfig("chat")


def test_from_cli_args_types_the_repeatable_flags_and_keeps_what_was_typed():
    args = parsed(
        "--metrics-url", "http://h:1/metrics", "--metrics-url", "http://h:2/metrics",
        "--header", "X-Team: a", "--set", "seed=3", "--drain", "cap:5", "--workers", "2",
    )  # fmt: skip
    args.argv = ["run", "chat", "--workers", "2"]
    config = RunConfig.from_cli_args(args)
    assert config.metrics_url == ("http://h:1/metrics", "http://h:2/metrics")
    assert config.header == (("X-Team", "a"),)
    assert config.scenario_sets() == [("seed", "3")]
    assert config.drain == DrainPolicy("cap", 5.0) and config.workers == 2
    assert config.argv == ("run", "chat", "--workers", "2")


def test_the_recorded_options_are_the_parsed_command_lines():
    args = parsed("--metrics-url", "http://h:1/metrics", "--seed", "4")
    options = RunConfig.from_cli_args(args).recorded_options()
    assert options == {"command": "run", **vars(args)}
    assert list(options) == ["command", *vars(args)]  # the header keeps them in the flags' order


def test_a_bad_set_is_one_line():
    with pytest.raises(UserError, match=r"^--set 'oops': expected KEY=VALUE"):
        RunConfig("chat", set=("oops",)).scenario_sets()


def test_with_credentials_reads_the_key_file_and_the_header_sources(tmp_path, monkeypatch):
    monkeypatch.setenv("RAMPWATCH_HEADERS", "X-Env: e\n")
    key = tmp_path / "key"
    key.write_text("sk-from-file\n")
    config = RunConfig("chat", api_key_file=str(key), header=(("X-Team", "t"),))
    resolved, warnings = config.with_credentials(stdin=io.StringIO(""))
    assert warnings == [] and resolved.api_key == "sk-from-file"
    assert resolved.header == (("X-Env", "e"), ("X-Team", "t"))
    assert resolved.child_environment(base={}) == {
        "OPENAI_API_KEY": "sk-from-file",
        "RAMPWATCH_HEADERS": "X-Env: e\nX-Team: t\n",
    }
    typed, warnings = RunConfig("chat", api_key="sk-typed").with_credentials()
    assert [w.split(":")[0] for w in warnings] == ["--api-key"]
    assert "sk-typed" in typed.command_line_secrets()


def test_where_the_key_came_from():
    assert RunConfig("chat", api_key_file="k").api_key_source() == "--api-key-file k"
    assert RunConfig("chat", api_key="x").api_key_source() == "--api-key"
    assert RunConfig("chat").api_key_source() == "$OPENAI_API_KEY"


def test_a_prometheus_host_without_a_port_is_one_line_not_silently_ignored():
    def typed(*argv: str) -> argparse.Namespace:
        args = parsed(*argv)
        args.argv = ["chat", *argv]  # what app.cli adds: the words typed
        return args

    with pytest.raises(UserError, match=r"--prometheus-host 0\.0\.0\.0: needs --prometheus-port PORT"):
        RunConfig.from_cli_args(typed("--prometheus-host", "0.0.0.0"))
    with pytest.raises(UserError, match="needs --prometheus-port"):
        RunConfig.from_cli_args(typed("--prometheus-host=0.0.0.0"))
    served = RunConfig.from_cli_args(parsed("--prometheus-host", "0.0.0.0", "--prometheus-port", "9400"))
    assert (served.prometheus_host, served.prometheus_port) == ("0.0.0.0", 9400)
    assert RunConfig.from_cli_args(parsed("--prometheus-port", "9400")).prometheus_host == "127.0.0.1"


def test_prometheus_linger_needs_a_port_and_defaults_to_two_scrape_intervals():
    args = parsed("--prometheus-linger", "5")
    args.argv = ["chat", "--prometheus-linger", "5"]
    with pytest.raises(UserError, match=r"^--prometheus-linger 5: needs --prometheus-port PORT$"):
        RunConfig.from_cli_args(args)
    assert RunConfig.from_cli_args(parsed("--prometheus-port", "9400")).prometheus_linger == 30.0
    assert (
        RunConfig.from_cli_args(parsed("--prometheus-port", "9400", "--prometheus-linger", "0")).prometheus_linger == 0
    )
