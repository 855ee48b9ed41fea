"""`rampwatch run` refusing, before anything starts, what it cannot do: two kinds of
authorization at once (a password in `--target` and an API key), and a
`RAMPWATCH_LOAD_GC` it does not know. One line, naming what is at fault, no secret."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rampwatch.core.errors import UserError
from rampwatch.loadgen.run.loop_health import GC_ENV, check_gc_policy

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "pa55word"
API_KEY = "sk-SECRET123"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rampwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", GC_ENV)}
    return subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "run", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    # the warning that a key on the command line is visible in ps is not the error
    lines = [line for line in proc.stderr.splitlines() if "visible to every user of this host" not in line]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, env, other",
    [
        (["--api-key", API_KEY], None, "--api-key"),
        ([], {"OPENAI_API_KEY": API_KEY}, "OPENAI_API_KEY (from the environment)"),
        (["--header", f"Authorization: Bearer {API_KEY}"], None, "--header Authorization"),
    ],
)
def test_a_password_in_the_target_and_an_api_key_are_refused_in_one_line(extra, env, other):
    # aiohttp refuses a request with both (a ValueError traceback, once): refused up front
    target = f"http://user:{PASSWORD}@127.0.0.1:{closed_port()}"
    proc = rampwatch("chat", "--target", target, *extra, "--headless", "--no-record", env=env)
    line = one_error_line(proc)
    assert proc.returncode == 2
    assert line == f"rampwatch run: error: {other} and a user:password in --target: give one of them"
    for secret in (PASSWORD, API_KEY):
        assert secret not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_an_unknown_load_gc_policy_stops_the_run_before_it_starts():
    # the target's port is closed: a run that started would end "cannot reach" (exit 3)
    proc = rampwatch(
        "chat", "--target", f"http://127.0.0.1:{closed_port()}", "--headless", "--no-record", env={GC_ENV: "garbage"}
    )
    assert one_error_line(proc) == "rampwatch run: error: RAMPWATCH_LOAD_GC='garbage': expected load or python"
    assert proc.returncode == 2


@pytest.mark.parametrize("value", ["", "load", "python", " Python ", "LOAD"])
def test_the_known_load_gc_policies_are_accepted(monkeypatch, value):
    monkeypatch.setenv(GC_ENV, value)
    check_gc_policy()


@pytest.mark.parametrize("value", ["garbage", "off", "0"])
def test_other_load_gc_policies_are_refused(monkeypatch, value):
    monkeypatch.setenv(GC_ENV, value)
    with pytest.raises(UserError, match=rf"^RAMPWATCH_LOAD_GC='{value}': expected load or python$"):
        check_gc_policy()


@pytest.mark.parametrize("extra", [("--api-key", API_KEY), ("--header", f"Authorization: Bearer {API_KEY}")])
def test_a_password_in_the_target_of_a_served_run_and_an_api_key_are_refused_in_one_line(tmp_path, extra):
    """With --serve the target's user:password goes to the server's URL: the same refusal,
    before the server starts (it was aiohttp's ValueError traceback once the server was up)."""
    from rampwatch.app.run_config import RunConfig
    from rampwatch.app.session.plan import plan_run

    port = closed_port()
    parser = argparse.ArgumentParser()
    RunConfig.add_cli_args(parser)
    args = parser.parse_args(
        ["chat", "--serve", f"rampwatch sim --port {port}", "--target", f"http://user:{PASSWORD}@127.0.0.1:{port}"]
        + [*extra, "--headless", "--no-record"]
    )
    config = RunConfig.from_cli_args(args)
    with pytest.raises(UserError, match="and a user:password in --target: give one of them") as caught:
        plan_run(config, claim=False)
    assert PASSWORD not in str(caught.value) and API_KEY not in str(caught.value)
