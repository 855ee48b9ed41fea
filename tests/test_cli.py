import subprocess
import sys

import pytest

from rampwatch.app.cli import SUBCOMMANDS, main


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("run", "sim", "replay", "report", "export", "compare"):
        assert name in SUBCOMMANDS
        assert f"    {name}" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("rampwatch ")


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "rampwatch" in out.stdout


def test_no_command_is_an_error(capsys):
    assert main([]) == 2
