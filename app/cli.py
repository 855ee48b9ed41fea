"""The `rampwatch` command line.

Each subcommand lives in its own module exposing ``configure(parser)`` and
``main(args) -> int``. A command's module is imported only when that command is
dispatched: ``rampwatch --help`` lists the commands from ``SUBCOMMANDS`` without importing
any, and ``rampwatch report …`` imports report's module alone, so a command module may
import what it needs at its top.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Collection

from rampwatch.core.errors import UserError
from rampwatch.core.files import silence_stdout, stdout_reader_gone
from rampwatch.core.version import rampwatch_version

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("rampwatch.app.run", "ramp load against a server (or the embedded simulator) and watch it live"),
    "search": (
        "rampwatch.app.search",
        "find the highest rate (or concurrency) that meets an SLO: ramp to bracket it, then confirm it with holds",
    ),
    "sweep": (
        "rampwatch.app.sweep.cli",
        "start a server with each set of engine arguments of a matrix, ramp each to its knee, pick the best",
    ),
    "sim": ("rampwatch.sim.cli", "serve the simulated vLLM server"),
    "ps": ("rampwatch.app.ps", "list this user's runs on this host: running, detached and recently finished"),
    "attach": ("rampwatch.app.attach", "watch and steer a running run from this terminal (a finished one: its replay)"),
    "stop": ("rampwatch.app.stop", "stop a run gracefully (drain, finish the recording) and wait for its exit code"),
    "replay": ("rampwatch.app.replay", "replay a recording in the live UI (optionally compared with another)"),
    "report": ("rampwatch.record.cli_report", "print the summary of a recording"),
    "export": ("rampwatch.record.cli_export", "export a recording as JSON, CSV, HTML or Parquet"),
    "compare": ("rampwatch.record.cli_compare", "compare two recordings side by side"),
}


# Each command's parser, once built (for its "unrecognized arguments" message).
SUBPARSERS: dict[str, argparse.ArgumentParser] = {}
# A command module's entry point: its exit code (None: 0).
Main = Callable[[argparse.Namespace], int | None]


def build_parser(commands: Collection[str] | None = None) -> tuple[argparse.ArgumentParser, dict[str, Main]]:
    """The parser, with the arguments of ``commands`` (None: of every command) and their
    ``main``s. Every command is listed; only those given have their module imported."""
    parser = argparse.ArgumentParser(
        prog="rampwatch",
        description="Live load tester for LLM inference servers: ramp the request rate, "
        "watch client latency and server /metrics on one time axis, record, replay, compare.",
    )
    parser.add_argument("--version", action="version", version=f"rampwatch {rampwatch_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mains: dict[str, Main] = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        SUBPARSERS[name] = p
        if commands is None or name in commands:
            module = importlib.import_module(module_name)
            module.configure(p)
            mains[name] = module.main
    return parser, mains


def command_named(argv: list[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the top level's
    only options, -h and --version, take no value); None when there is none or it is not
    a command (then argparse says so, listing the commands)."""
    word = next((w for w in argv if not w.startswith("-")), None)
    return word if word in SUBCOMMANDS else None


def unknown_arguments(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's "unrecognized arguments" with the closest option of the command for
    each misspelt flag (``--durations`` → ``--duration``)."""
    options = [o for action in parser._actions for o in action.option_strings]  # noqa: SLF001
    hints = []
    for word in extras:
        flag = word.split("=", 1)[0]
        if flag.startswith("--"):
            # Never the word itself: an option placed after ``--`` exists, and is not misspelt.
            close = difflib.get_close_matches(flag, [o for o in options if o != flag], n=1, cutoff=0.75)
            if close and flag not in options:
                hints.append(f"{flag}: did you mean {close[0]}?")
    return f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")


def on_a_terminal() -> bool:
    """Both ends of the session are a terminal (the start screen reads keys and draws)."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


# The exit code of a command whose standard output was closed by its reader (`| head -1`):
# the shell's for a process ended by SIGPIPE (128 + 13), as `cat` or `grep` give there.
CLOSED_STDOUT_EXIT = 141


def main(argv: list[str] | None = None) -> int:
    """Every command: its reader closing standard output early (`rampwatch report REC |
    head -1`) ends it quietly with ``CLOSED_STDOUT_EXIT``, never a traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise
        silence_stdout()
        return CLOSED_STDOUT_EXIT


def _main(argv: list[str] | None) -> int:
    typed = list(argv if argv is not None else sys.argv[1:])
    command = command_named(typed)
    parser, mains = build_parser(() if command is None else (command,))
    args, extras = parser.parse_known_args(typed)
    if extras:
        command_parser = SUBPARSERS.get(args.command or "", parser)
        command_parser.error(unknown_arguments(command_parser, extras))
    # What was typed, for `rampwatch run --detach` to start the same run in the background.
    args.argv = typed
    dispatch: Main
    if not args.command:
        if not on_a_terminal():  # a script or a pipe: the usage, as before
            parser.print_help()
            return 2
        try:
            from rampwatch.app.start import choose_run

            config = choose_run()
        except UserError as exc:
            print(f"rampwatch: error: {exc}", file=sys.stderr)
            return exc.exit_code
        except KeyboardInterrupt:
            return 130
        if config is None:
            return 0
        # the choice runs as `rampwatch run` runs its command line's configuration
        from rampwatch.app.run import run as run_configured

        chosen = config

        def run_chosen(_args: argparse.Namespace) -> int | None:
            return run_configured(chosen)

        args.command, dispatch = "run", run_chosen
    else:
        dispatch = mains[args.command]
    try:
        return int(dispatch(args) or 0)
    except UserError as exc:
        print(f"rampwatch {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"rampwatch {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
