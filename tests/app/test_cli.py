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


@pytest.mark.slow
def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "rampwatch.app.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    assert "rampwatch" in out.stdout


def test_no_command_is_an_error(capsys):
    assert main([]) == 2


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["run", "random", "--durations", "10"],
            "rampwatch run: error: unrecognized arguments: --durations 10 (--durations: did you mean --duration?)",
        ),
        (
            ["run", "random", "--scrape-intervall=2", "--zzz"],
            "rampwatch run: error: unrecognized arguments: --scrape-intervall=2 --zzz "
            "(--scrape-intervall: did you mean --scrape-interval?)",
        ),
        (["report", "x.rwrec", "--bogus"], "rampwatch report: error: unrecognized arguments: --bogus"),
        # an option of the command after "--" is not misspelt: no "did you mean" the same flag
        (["run", "chat", "--", "--duration"], "rampwatch run: error: unrecognized arguments: --duration"),
        (["run", "chat", "--", "--header=X:1"], "rampwatch run: error: unrecognized arguments: --header=X:1"),
    ],
)
def test_a_misspelt_flag_names_the_closest_one(capsys, argv, line):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == line


@pytest.mark.parametrize("flag", ["--scrape-interval", "--request-timeout", "--stop-grace", "--duration"])
def test_run_flags_say_what_they_do_and_their_default(capsys, flag):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    described = text.rsplit(f"{flag} SECONDS", 1)[1].split(" --", 1)[0]  # its entry, after the usage
    assert "default" in described and len(described) > 30


def command_modules_loaded(statement: str) -> list[str]:
    """The command modules loaded once ``statement`` has run, in a fresh interpreter."""
    code = (
        "import contextlib, io, sys\n"
        "from rampwatch.app.cli import SUBCOMMANDS, main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    {statement}\n"
        "print(' '.join(sorted(m for m, _ in SUBCOMMANDS.values() if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.slow
def test_help_lists_the_commands_without_importing_them():
    assert command_modules_loaded("main(['--help'])") == []


@pytest.mark.slow
def test_a_command_imports_its_own_module_only():
    """report's module and what it imports itself (compare's helpers), no other command's."""
    loaded = command_modules_loaded("main(['report', '--help'])")
    assert "rampwatch.record.cli_report" in loaded
    assert loaded == command_modules_loaded("import rampwatch.record.cli_report")
