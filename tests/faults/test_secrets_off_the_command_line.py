"""Secrets kept out of the process table (issue 26, item 4): every user of a host reads
each process's command line (`ps`), so the API key and the `--header` values may come from
a file, standard input or the environment; given on the command line they work, with one
warning line; a process rampwatch starts for the run gets them in its environment, never
in its argument list."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from collections import Counter

import pytest

from rampwatch.app.cli import build_parser
from rampwatch.app.detach import child_argv
from rampwatch.app.run_config import RunConfig
from rampwatch.core.errors import UserError
from rampwatch.loadgen.transport.connection import HEADERS_ENV
from tests.faults.test_connection_options import HEADER, REPO, TOKEN, Gateway, short_run

KEY = "sk-file-9d8c7b6a"


def run_args(*argv: str) -> argparse.Namespace:
    parser, _ = build_parser()
    return parser.parse_args(["run", "chat", *argv])


def run_config(*argv: str) -> RunConfig:
    return RunConfig.from_cli_args(run_args(*argv))


def test_the_key_from_a_file_or_stdin_and_headers_from_a_file_stdin_or_the_environment(tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    key_file.write_text(f"{KEY}\n")
    headers = tmp_path / "headers"
    headers.write_text("# the gateway's\nX-Gateway-Token: from-file\n\nX-Team: tuning\n")
    monkeypatch.setenv(HEADERS_ENV, "X-Gateway-Token: from-env\nX-Env: e\n")

    config = run_config("--api-key-file", str(key_file), "--header-file", str(headers), "--header", "X-Team: typed")
    config, warnings = config.with_credentials()
    assert warnings == []  # nothing secret on the command line
    assert config.api_key == KEY
    # the environment's, then the file's, then the flags': a later one of the same name wins
    from rampwatch.loadgen.transport.connection import Connection

    assert Connection(headers=config.header).extra_headers() == {
        "X-Gateway-Token": "from-file",
        "X-Env": "e",
        "X-Team": "typed",
    }

    monkeypatch.delenv(HEADERS_ENV)
    config, _ = run_config("--api-key-file", "-").with_credentials(stdin=io.StringIO(KEY + "\n"))
    assert config.api_key == KEY
    config, _ = run_config("--header-file", "-").with_credentials(stdin=io.StringIO("Authorization: Bearer abc\n"))
    assert config.header == (("Authorization", "Bearer abc"),)


@pytest.mark.parametrize(
    ("argv", "content", "expected"),
    [
        (["--api-key-file", "{missing}"], None, r"^--api-key-file .*missing: no such file$"),
        (["--api-key-file", "{file}"], "\n", r"^--api-key-file .*: empty \(the key is its first line\)$"),
        (["--header-file", "{file}"], "X-A: 1\nno colon here sk-zzz\n", r"^.*file:2: expected NAME:VALUE"),
        (["--header-file", "{file}"], "Host: other\n", r"^.*file:1: Host is set by rampwatch itself$"),
        (["--api-key-file", "-", "--header-file", "-"], None, r"only one of them can read standard input"),
    ],
)
def test_a_bad_key_or_header_file_is_one_line_naming_it_and_never_its_values(tmp_path, argv, content, expected):
    path = tmp_path / "file"
    if content is not None:
        path.write_text(content)
    argv = [a.format(missing=tmp_path / "missing", file=path) for a in argv]
    with pytest.raises(UserError, match=expected) as err:
        run_config(*argv).with_credentials(stdin=io.StringIO(""))
    assert "sk-zzz" not in str(err.value) and "\n" not in str(err.value)


def test_the_key_flags_exclude_each_other_and_help_says_the_command_line_is_visible(capsys):
    parser, _ = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "chat", "--api-key", "x", "--api-key-file", "f"])
    assert "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--api-key-file" in text and "--header-file" in text
    assert "visible to every user of this host" in text


@pytest.mark.parametrize(
    ("argv", "warned"),
    [
        (["--api-key", "sk-typed-1"], ["--api-key"]),
        (["--header", "X-Gateway-Token: t"], ["--header X-Gateway-Token"]),
        (["--header", "X-Team: tuning"], []),  # a name that is no secret: no warning
        ([], []),
    ],
)
def test_a_secret_on_the_command_line_is_one_warning_saying_what_else_to_use(argv, warned):
    _, warnings = run_config(*argv).with_credentials()
    assert [w.split(":")[0] for w in warnings] == warned
    for warning in warnings:
        assert "visible to every user" in warning and "sk-typed-1" not in warning and " t;" not in warning


def test_a_detached_run_gets_its_key_and_headers_in_its_environment_not_its_command_line(tmp_path, monkeypatch):
    headers = tmp_path / "h"
    headers.write_text("X-File: f-secret-1\n")
    typed = [
        "run", "chat", "--detach", "--api-key", "sk-typed-2", "--header", "X-Gateway-Token: g-secret-3",
        f"--header-file={headers}", "--duration", "60",
    ]  # fmt: skip
    config, _ = RunConfig.from_cli_args(build_parser()[0].parse_args(typed)).with_credentials()
    argv = child_argv(typed, "abcd0000", tmp_path / "run.log", None)
    assert not any(secret in " ".join(argv) for secret in ("sk-typed-2", "g-secret-3", "--header", str(headers)))
    env = config.child_environment(base={})
    assert env["OPENAI_API_KEY"] == "sk-typed-2"
    # the child reads them back as they were
    monkeypatch.setenv(HEADERS_ENV, env[HEADERS_ENV])
    child, _ = RunConfig.from_cli_args(build_parser()[0].parse_args(argv[4:])).with_credentials()
    assert child.header == (("X-File", "f-secret-1"), ("X-Gateway-Token", "g-secret-3"))  # in their order


@pytest.mark.slow
def test_a_run_with_its_header_on_stdin_reaches_the_gateway_without_a_warning():
    with Gateway() as gw:
        proc = subprocess.run(
            [sys.executable, "-m", "rampwatch.app.cli", "run", *short_run(gw.url, "--header-file", "-", "--no-record")],
            input=HEADER + "\n", cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        typed = subprocess.run(
            [sys.executable, "-m", "rampwatch.app.cli", "run", *short_run(gw.url, "--header", HEADER, "--no-record")],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 0 and typed.returncode == 0, proc.stderr + typed.stderr
    assert gw.unauthorised == Counter() and gw.hits["/v1/completions"] >= 8
    assert "warning" not in proc.stderr
    warnings = [line for line in typed.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "rampwatch run: warning: --header X-Gateway-Token: the command line is visible to every user of this "
        f"host (ps); pass it in --header-file PATH (- : stdin) or ${HEADERS_ENV} instead"
    ]
    assert TOKEN not in proc.stdout + proc.stderr + typed.stdout + typed.stderr


@pytest.mark.slow
def test_a_key_typed_on_the_command_line_is_overwritten_in_the_process_table():
    script = (
        "import json, sys\n"
        "from rampwatch.app.credentials import hide_in_process_table\n"
        "hidden = hide_in_process_table([sys.argv[2], sys.argv[4].split(': ')[1]])\n"
        "shown = open('/proc/self/cmdline', 'rb').read().decode().split('\\0')\n"
        "print(json.dumps([hidden, shown[3:-1], sys.argv[1:]]))\n"
    )
    argv = ["--api-key", "sk-typed-4", "--header", "X-Token: g-secret-5", "--rate", "5"]
    proc = subprocess.run([sys.executable, "-c", script, *argv], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    hidden, shown, kept = json.loads(proc.stdout)
    assert hidden is True
    assert shown == ["--api-key", "**********", "--header", "X-Token: **********", "--rate", "5"]  # what ps shows
    assert kept == argv  # Python's own copy


def test_the_process_table_loses_url_passwords_and_the_serve_lines_secrets_too():
    """`ps` showed `--target http://alice:pw…@host` and `--serve "VLLM_API_KEY=… vllm
    serve"` for the whole run: they are hidden with the key and the headers."""
    config = RunConfig(
        "chat",
        header=(("X-Team", "blue"),),
        target="http://alice:pw-URLSECRET-999@127.0.0.1:8000",
        metrics_url=("http://u:m-SECRET-42@127.0.0.1:8000/metrics",),
        serve="VLLM_API_KEY=vk-VerySecret-789 vllm serve m --api-key served-key-123 --port 8000",
    )
    hidden = config.command_line_secrets()
    for secret in ("pw-URLSECRET-999", "m-SECRET-42", "vk-VerySecret-789", "served-key-123"):
        assert secret in hidden
    assert "blue" not in hidden and "8000" not in hidden and "vllm" not in hidden
