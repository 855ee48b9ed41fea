"""`rampwatch run`: its flags (``app.run_config.RunConfig``), and the choice between
detaching, the live UI (on a terminal) and the headless path. The wiring itself is in
``rampwatch.app.session``; the live screen's (Textual) only once a run shows it."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TextIO

from rampwatch.app import credentials, runs
from rampwatch.app.ray_run import check_ray_flags
from rampwatch.app.run_config import RunConfig
from rampwatch.core.files import release_all


def configure(parser: argparse.ArgumentParser) -> None:
    RunConfig.add_cli_args(parser)


def want_tui(args: argparse.Namespace | RunConfig, stdout: TextIO | None = None) -> bool:
    """The live screen: not --headless, and standard output is a terminal."""
    stdout = stdout if stdout is not None else sys.stdout
    if args.headless:
        return False
    try:
        return bool(stdout.isatty())
    except (AttributeError, ValueError):
        return False


def main(args: argparse.Namespace) -> int:
    return run(RunConfig.from_cli_args(args))


def run(config: RunConfig) -> int:
    """A run of ``config``: detached, on the live screen or headless."""
    check_ray_flags(config.ray)
    config, warnings = config.with_credentials()
    for warning in warnings:
        print(f"rampwatch run: warning: {warning}", file=sys.stderr)
    credentials.hide_in_process_table(config.command_line_secrets())
    # The run's machinery (the whole product) is imported here, not at the top: `run --help`
    # and a bad flag need only the parser, which is RunConfig's.
    from rampwatch.app.detach import launch

    if config.repeats > 1 and config.repeat is None:  # N runs one after another (app.repeats)
        from rampwatch.app.repeats import run_repeats

        return run_repeats(config, run_once)
    if config.detach:
        return launch(config)
    return run_once(config)


def run_once(config: RunConfig) -> int:
    """One run of ``config`` (credentials resolved): on the live screen or headless."""
    from rampwatch.app.session import run_headless

    run_id = config.run_id or runs.new_run_id()
    config = replace(config, run_id=run_id)
    code = 1
    try:
        if want_tui(config):
            # the live screen's modules (Textual) only for a run that shows it
            from rampwatch.app.live import run_live

            code = run_live(config)
        else:
            code = run_headless(config)
    except KeyboardInterrupt:
        code = 130
        raise
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        raise
    except Exception as exc:
        code = getattr(exc, "exit_code", 1)
        raise
    finally:
        release_all()  # the run's outputs, whichever way it ended (finish_run let them go already)
        runs.finished(run_id, code)  # for `rampwatch ps` and `rampwatch stop`
    if config.prometheus_port is not None:  # the port serves on until a scrape reads the end
        from rampwatch.app.session import prometheus_targets
        from rampwatch.app.session.prometheus_linger import linger

        linger(config.prometheus_linger, prometheus_targets)
    return code
