"""`rampwatch search`: `rampwatch run`'s flags and run path, with a search for the
highest load that meets an SLO (``--slo``): the scenario's ramp brackets it, holds
bisect it (``core.figures.search`` decides, ``loadgen.run.search_control`` steers the
run). The live screen, ``--detach``, the recording, replay and the result JSON are the
run's own; the answer is one line, and a search that cannot bracket exits 1."""

from __future__ import annotations

import argparse
from dataclasses import replace

from rampwatch.app import run as run_command
from rampwatch.app.run_config import RunConfig, positive_float
from rampwatch.core.errors import UserError
from rampwatch.core.figures.search import BY_CHOICES, DEFAULT_TOLERANCE, SearchPlan

# The exit code of a search that found no maximum (it could not bracket one).
NO_MAXIMUM_EXIT = 1


def configure(parser: argparse.ArgumentParser) -> None:
    RunConfig.add_cli_args(parser)
    group = parser.add_argument_group("search")
    group.add_argument(
        "--slo",
        required=True,
        metavar="SLO",
        help="the objective the maximum must meet, e.g. ttft_p99<500ms,itl_p99<50ms[,error_rate<1%%]",
    )
    group.add_argument(
        "--by",
        choices=BY_CHOICES,
        default="rate",
        help="what is held: the request rate (a linear or exponential ramp's), or concurrent users "
        "(a users schedule's start_users → end_users; a session workload) (default: rate)",
    )
    group.add_argument(
        "--tolerance",
        default=DEFAULT_TOLERANCE,
        metavar="STEP",
        help=f"how close the answer is known: a step in the level's unit (0.5) or a share of the bracket's "
        f"upper bound (5%%) (default {DEFAULT_TOLERANCE.replace('%', '%%')})",
    )
    group.add_argument(
        "--hold",
        type=positive_float,
        metavar="SECONDS",
        help="judge each hold for this long (default: until the SLO's highest percentile has 10 requests "
        "beyond it, 10–300 s)",
    )


def plan_of(args: argparse.Namespace) -> SearchPlan:
    return SearchPlan.from_flags(args.slo, by=args.by, tolerance=args.tolerance, hold_s=args.hold)


def main(args: argparse.Namespace) -> int:
    config = RunConfig.from_cli_args(args)
    if config.repeats > 1:  # a search's answer has no interval over repeats (yet): not silently N searches
        raise UserError(f"--repeats {config.repeats}: not with rampwatch search (run the search again to compare)")
    config = replace(config, search=plan_of(args))
    return run_command.run(config)
