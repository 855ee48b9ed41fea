import argparse
import io

import pytest

from rampwatch.app import replay as replay_command
from rampwatch.app import run as run_command
from rampwatch.core.errors import UserError


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize(
    "headless, stdout, expected", [(False, Tty(), True), (True, Tty(), False), (False, io.StringIO(), False)]
)
def test_the_tui_runs_only_on_a_terminal_without_headless(headless, stdout, expected):
    assert run_command.want_tui(argparse.Namespace(headless=headless), stdout) is expected


def test_replay_of_a_missing_file_names_it(tmp_path):
    parser = argparse.ArgumentParser()
    replay_command.configure(parser)
    args = parser.parse_args([str(tmp_path / "nope.rwrec")])
    with pytest.raises(UserError, match="nope.rwrec: no such recording"):
        replay_command.main(args)


def test_replay_speed_is_checked():
    parser = argparse.ArgumentParser()
    replay_command.configure(parser)
    with pytest.raises(UserError, match="--speed 32"):
        replay_command.main(parser.parse_args(["x.rwrec", "--speed", "32"]))
